/** The shares page (SPEC §9): the account's shares, live and revoked, with revoke. */
import { shareFileCount, type ShareRecord } from '../../store/types.ts';
import { html, type Html } from '../html.ts';
import { accountPath, when } from '../layout.ts';

/** The snapshot's title, if it has a string one (snapshots are stored as published JSON text). */
export function shareTitle(r: ShareRecord): string {
  if (r.snapshot === undefined) return '';
  try {
    const t = (JSON.parse(r.snapshot) as { title?: unknown }).title;
    return typeof t === 'string' ? t : '';
  } catch {
    return '';
  }
}

export function shareRow(account: string, r: ShareRecord): Html {
  const action = accountPath(account, `/shares/${encodeURIComponent(r.slug)}/revoke`);
  return html`<tr id="share-${r.slug}" class="${r.revoked_at ? 'off' : ''}">
    <td class="mono">${r.revoked_at ? r.slug : html`<a href="/v1/shares/${r.slug}">${r.slug}</a>`}</td>
    <td>${shareTitle(r) || html`<span class="sub">untitled</span>`}</td>
    <td class="hide-sm">${when(r.created_at)}</td>
    <td class="hide-sm num">${shareFileCount(r)}</td>
    <td><span class="badge ${r.revoked_at ? 'revoked' : 'active'}">${r.revoked_at ? 'revoked' : 'live'}</span></td>
    <td class="actions">
      ${
        r.revoked_at
          ? html`<span class="sub">${when(r.revoked_at)}</span>`
          : html`<form
              method="post"
              action="${action}"
              hx-post="${action}"
              hx-target="closest tr"
              hx-swap="outerHTML"
              hx-confirm="Revoke this share? Its link stops working everywhere within a second."
            >
              <button class="small danger" type="submit">Revoke</button>
            </form>`
      }
    </td>
  </tr>`;
}

export function sharesBody(account: string, shares: readonly ShareRecord[], limit: number): Html {
  return html`<div class="head">
      <div>
        <h1>Shares</h1>
        <p class="sub">Conversations published by account <strong>${account}</strong>. Anyone with a live share's link can read it.</p>
      </div>
    </div>
    <section class="panel flush">
      <table id="shares" class="cards">
        <thead>
          <tr>
            <th>Slug</th>
            <th>Title</th>
            <th class="hide-sm">Created</th>
            <th class="hide-sm num">Files</th>
            <th>State</th>
            <th class="actions">Revocation</th>
          </tr>
        </thead>
        <tbody>
          ${
            shares.length === 0
              ? html`<tr>
                  <td colspan="6" class="empty">No shares yet.</td>
                </tr>`
              : shares.map((r) => shareRow(account, r))
          }
        </tbody>
      </table>
      ${shares.length === limit ? html`<div class="pager"><span class="sub">The newest ${limit} shares are shown.</span></div>` : ''}
    </section>`;
}
