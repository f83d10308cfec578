/** The operator's pages (SPEC §9): the account list with search, and a freshly minted member link. */
import { ACCOUNT_ID } from '../../store/types.ts';
import { html, type Html } from '../html.ts';
import { accountPath, when } from '../layout.ts';

export function accountsBody(search: string, ids: readonly string[], limit: number): Html {
  // Accounts exist implicitly (SPEC §2a): any valid id can be opened, even one with nothing in it yet.
  const openable = ids.length === 0 && ACCOUNT_ID.test(search);
  return html`<div class="head">
      <div>
        <h1>Accounts</h1>
        <p class="sub">Every account with keys or credit. Open one to manage its keys, credit and shares.</p>
      </div>
    </div>
    <section class="panel">
      <form class="inline" method="get" action="/console/accounts" role="search">
        <input type="search" name="q" value="${search}" placeholder="Search accounts" aria-label="Search accounts" />
        <button type="submit">Search</button>
      </form>
    </section>
    <section class="panel flush">
      <table id="accounts">
        <thead>
          <tr>
            <th>Account</th>
            <th class="actions"></th>
          </tr>
        </thead>
        <tbody>
          ${ids.map(
            (id) =>
              html`<tr>
                <td><a href="${accountPath(id, '/keys')}">${id}</a></td>
                <td class="actions">
                  <a href="${accountPath(id, '/keys')}">Keys</a> · <a href="${accountPath(id, '/credit')}">Credit</a> ·
                  <a href="${accountPath(id, '/shares')}">Shares</a>
                </td>
              </tr>`,
          )}
          ${
            ids.length === 0 && !openable
              ? html`<tr>
                  <td colspan="2" class="empty">No account matches.</td>
                </tr>`
              : ''
          }
          ${
            openable
              ? html`<tr>
                  <td colspan="2">
                    <a href="${accountPath(search, '/keys')}">Open account “${search}”</a> <span class="sub">(nothing in it yet)</span>
                  </td>
                </tr>`
              : ''
          }
        </tbody>
      </table>
      ${ids.length === limit ? html`<div class="pager"><span class="sub">The first ${limit} matches are shown; narrow the search.</span></div>` : ''}
    </section>`;
}

/** The link an operator minted for a member: shown once on this response, like a key. */
export function linkBody(account: string, link: { url: string; expires_at: string }): Html {
  return html`<div class="head">
      <div>
        <h1>Member sign-in link</h1>
        <p class="sub">For account <strong>${account}</strong>. It signs one browser in once, until ${when(link.expires_at)}.</p>
      </div>
    </div>
    <section class="panel">
      <p>Send it to the member over a private channel. Whoever opens it first is signed in as a member of this account.</p>
      <div class="secret">
        <code id="member-link">${link.url}</code>
        <button type="button" data-copy="member-link">Copy</button>
      </div>
      <p><a href="${accountPath(account, '/keys')}">← Back to ${account}</a></p>
    </section>`;
}
