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

/** `unreadTitle`: the page did not read this share's snapshot for its title (sharesBody's byte budget). */
export function shareRow(account: string, r: ShareRecord, unreadTitle = false): Html {
  const action = accountPath(account, `/shares/${encodeURIComponent(r.slug)}/revoke`);
  return html`<tr id="share-${r.slug}" class="${r.revoked_at ? 'off' : ''}">
    <td class="mono">${r.revoked_at ? r.slug : html`<a href="/v1/shares/${r.slug}">${r.slug}</a>`}</td>
    <td>${unreadTitle ? html`<span class="sub">title not read</span>` : shareTitle(r) || html`<span class="sub">untitled</span>`}</td>
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

/** `titles.unread`: shares whose snapshots were left unread, past `titles.titleBytes` of snapshots read for titles. */
export function sharesBody(
  account: string,
  shares: readonly ShareRecord[],
  limit: number,
  titles: { unread: ReadonlySet<string>; titleBytes: number } = { unread: new Set(), titleBytes: 0 },
): Html {
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
              : shares.map((r) => shareRow(account, r, titles.unread.has(r.slug)))
          }
        </tbody>
      </table>
      ${
        titles.unread.size > 0
          ? html`<div class="pager" id="titles-unread">
              <span class="sub"
                >Titles are read from the snapshots, newest first, up to ${titles.titleBytes / 1024 / 1024} MiB of them per page:
                ${titles.unread.size} ${titles.unread.size === 1 ? 'share shows' : 'shares show'} no title.</span
              >
            </div>`
          : ''
      }
      ${shares.length === limit ? html`<div class="pager"><span class="sub">The newest ${limit} shares are shown.</span></div>` : ''}
    </section>`;
}
