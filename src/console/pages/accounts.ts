/** The operator's pages (SPEC §9): the account list with search and sort, and a freshly minted member link. */
import { ACCOUNT_ID } from '../../store/types.ts';
import { html, type Html } from '../html.ts';
import { accountPath, when } from '../layout.ts';
import { credits } from './credit.ts';

/** One account as the list shows it. */
export interface AccountSummary {
  id: string;
  balance_micros: number;
  held_micros: number;
  keys: number;
  active_keys: number;
  /** ISO minute of the newest use of any of its keys, or undefined. */
  last_used: string | undefined;
}

export const ACCOUNT_SORTS = ['name', 'balance', 'keys', 'last_used'] as const;
export type AccountSort = (typeof ACCOUNT_SORTS)[number];
export type SortDir = 'asc' | 'desc';

/** The list in the chosen order; ties (and the name sort) by id, so the order is stable. */
export function sortAccounts(rows: AccountSummary[], sort: AccountSort, dir: SortDir): AccountSummary[] {
  const key = (r: AccountSummary): number | string =>
    sort === 'balance' ? r.balance_micros : sort === 'keys' ? r.keys : sort === 'last_used' ? (r.last_used ?? '') : r.id;
  const sign = dir === 'asc' ? 1 : -1;
  return rows.sort((a, b) => {
    const x = key(a);
    const y = key(b);
    const c = x < y ? -1 : x > y ? 1 : 0;
    return c !== 0 ? sign * c : a.id.localeCompare(b.id);
  });
}

const LABELS: Record<AccountSort, string> = { name: 'Account', balance: 'Balance', keys: 'Keys', last_used: 'Last used' };
/** The sort menu beside the search box (what a phone has, its table headers hidden): each sort's first order. */
const SORT_OPTIONS: Record<AccountSort, string> = {
  name: 'name',
  balance: 'balance, largest first',
  keys: 'keys, most first',
  last_used: 'last used, newest first',
};
/** The first click on a column: names A→Z, figures and dates largest / newest first. */
const FIRST_DIR: Record<AccountSort, SortDir> = { name: 'asc', balance: 'desc', keys: 'desc', last_used: 'desc' };

export interface AccountsView {
  search: string;
  rows: readonly AccountSummary[];
  /** The cap on accounts read (and shown); reaching it means there may be more. */
  limit: number;
  sort: AccountSort;
  dir: SortDir;
}

function sortHeader(v: AccountsView, col: AccountSort, cls = ''): Html {
  const active = v.sort === col;
  const dir: SortDir = active ? (v.dir === 'asc' ? 'desc' : 'asc') : FIRST_DIR[col];
  const params = new URLSearchParams({ ...(v.search && { q: v.search }), sort: col, dir });
  const arrow = active ? (v.dir === 'asc' ? ' ↑' : ' ↓') : '';
  return html`<th class="${cls}" ${active ? html`aria-sort="${v.dir === 'asc' ? 'ascending' : 'descending'}"` : ''}>
    <a class="sort" href="/console/accounts?${params.toString()}">${LABELS[col]}${arrow}</a>
  </th>`;
}

export function accountsBody(v: AccountsView): Html {
  const { search, rows, limit } = v;
  // Accounts exist implicitly (SPEC §2a): any valid id can be opened, even one with nothing in it yet
  // (its keys page then says so and asks before creating a key in it).
  const openable = rows.length === 0 && ACCOUNT_ID.test(search);
  return html`<div class="head">
      <div>
        <h1>Accounts</h1>
        <p class="sub">Every account with keys or credit. Open one to manage its keys, credit and shares.</p>
      </div>
    </div>
    <section class="panel">
      <form class="inline" method="get" action="/console/accounts" role="search">
        <input type="search" name="q" value="${search}" placeholder="Search accounts" aria-label="Search accounts" />
        <label class="row"
          >Sort by
          <select name="sort">
            ${ACCOUNT_SORTS.map((s) => html`<option value="${s}" ${s === v.sort ? html`selected` : ''}>${SORT_OPTIONS[s]}</option>`)}
          </select>
        </label>
        <button type="submit">Search</button>
      </form>
    </section>
    <section class="panel flush">
      <table id="accounts" class="kv">
        <thead>
          <tr>
            ${sortHeader(v, 'name')} ${sortHeader(v, 'balance', 'num')} ${sortHeader(v, 'keys', 'num')} ${sortHeader(v, 'last_used')}
            <th class="actions"><span class="hide-sm">Pages</span></th>
          </tr>
        </thead>
        <tbody>
          ${rows.map(
            (r) =>
              html`<tr data-account="${r.id}">
                <td class="account"><a href="${accountPath(r.id, '/keys')}">${r.id}</a></td>
                <td class="num credits" data-label="Balance">
                  <span class="amount ${r.balance_micros < 0 ? 'neg' : ''}">${credits(r.balance_micros)}</span>${
                    r.held_micros > 0 ? html` <span class="sub">(${credits(r.held_micros)} held)</span>` : ''
                  }
                </td>
                <td class="num" data-label="Keys">
                  ${r.active_keys}${r.keys > r.active_keys ? html` <span class="sub">+ ${r.keys - r.active_keys} off</span>` : ''}
                </td>
                <td class="when" data-label="Last used">${r.last_used ? when(r.last_used) : 'never'}</td>
                <td class="actions">
                  <a href="${accountPath(r.id, '/keys')}">Keys</a> · <a href="${accountPath(r.id, '/credit')}">Credit</a> ·
                  <a href="${accountPath(r.id, '/usage')}">Usage</a> · <a href="${accountPath(r.id, '/shares')}">Shares</a>
                </td>
              </tr>`,
          )}
          ${
            rows.length === 0 && !openable
              ? html`<tr>
                  <td colspan="5" class="empty">No account matches.</td>
                </tr>`
              : ''
          }
          ${
            openable
              ? html`<tr>
                  <td colspan="5">
                    No account matches. <a href="${accountPath(search, '/keys')}">Open account “${search}”</a>
                    <span class="sub">(it does not exist yet)</span>
                  </td>
                </tr>`
              : ''
          }
        </tbody>
      </table>
      ${
        rows.length === limit
          ? html`<div class="pager">
              <span class="sub">The first ${limit} matches by name are read and sorted here; narrow the search to see the others.</span>
            </div>`
          : ''
      }
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
