/** The keys page (SPEC §9): the account's keys, the create form, and the dialog that shows a new key once. */
import type { KeyRecord } from '../../store/types.ts';
import { BUDGET_PERIODS, SCOPES } from '../../store/types.ts';
import type { BudgetView } from '../../credit/budget.ts';
import { isExpired } from '../../auth/key-table.ts';
import { html, type Html } from '../html.ts';
import { accountPath, when } from '../layout.ts';
import { credits } from './credit.ts';

/** The lifetimes the operator chooses from for a member link (seconds; LINK_TTL allows 60..86400). */
export const LINK_LIFETIMES: readonly (readonly [number, string])[] = [
  [300, '5 minutes'],
  [3600, '1 hour'],
  [8 * 3600, '8 hours'],
  [86_400, '24 hours'],
];

/** What an operator sees above an account's keys: mint a member sign-in link, end the members' sessions. */
function operatorTools(account: string): Html {
  return html`<section class="panel">
    <h2>Operator</h2>
    <div class="inline-forms">
      <form class="inline" method="post" action="${accountPath(account, '/links')}">
        <label class="row"
          >Valid for
          <select name="ttl_seconds">
            ${LINK_LIFETIMES.map(([s, label]) => html`<option value="${s}" ${s === 300 ? html`selected` : ''}>${label}</option>`)}
          </select>
        </label>
        <button type="submit">Create a member sign-in link</button>
      </form>
      <form
        class="inline"
        method="post"
        action="${accountPath(account, '/sessions/end')}"
        hx-post="${accountPath(account, '/sessions/end')}"
        hx-target="#flash"
        hx-confirm="Sign every member of ${account} out of the console now? Their sign-in links not yet opened stop working too."
      >
        <button class="danger" type="submit">Sign all members out</button>
      </form>
    </div>
  </section>`;
}

/** key id → ISO minute of its last request (usage.lastUsed); a key missing from it was never used. */
export type LastUsed = Readonly<Record<string, string>>;

/** `when()` in two unbreakable halves (day, time), so the two date columns wrap between them, not mid-date. */
function stamp(iso: string): Html {
  const [day, time] = when(iso).split(/ (.*)/);
  return html`<span class="stamp">${day}</span> <span class="stamp">${time}</span>`;
}

/** A key as the pages show it: the record, its last use, its budget with the current period's spend. */
export interface KeyView {
  record: KeyRecord;
  lastUsed: string | undefined;
  budget: BudgetView | null;
}

export type KeyStatus = 'active' | 'disabled' | 'expired';
/** Disabled wins over expired (enabling it would not make it work: its expiry would still refuse it). */
export function keyStatus(k: KeyRecord, nowMs: number): KeyStatus {
  return !k.active ? 'disabled' : isExpired(k, nowMs) ? 'expired' : 'active';
}

export const KEY_SORTS = ['name', 'created', 'last_used', 'status'] as const;
export type KeySort = (typeof KEY_SORTS)[number];
export type KeySortDir = 'asc' | 'desc';
const SORT_LABELS: Record<KeySort, string> = { name: 'Name', created: 'Created', last_used: 'Last used', status: 'Status' };
const SORT_OPTIONS: Record<KeySort, string> = {
  name: 'name',
  created: 'created, newest first',
  last_used: 'last used, newest first',
  status: 'status (active first)',
};
/** A column's first order: names A→Z, dates newest first, active keys first. */
export const KEY_FIRST_DIR: Record<KeySort, KeySortDir> = { name: 'asc', created: 'desc', last_used: 'desc', status: 'asc' };
const STATUS_ORDER: Record<KeyStatus, number> = { active: 0, expired: 1, disabled: 2 };

/** What the table shows: keys matching `q` (name substring, case-insensitive, or the last four), in order. */
export interface KeyListing {
  q: string;
  sort: KeySort;
  dir: KeySortDir;
}
/** Newest first: a key just created heads the table. */
export const DEFAULT_LISTING: KeyListing = { q: '', sort: 'created', dir: 'desc' };

/** Keys whose name contains `q` (any case) or whose last four characters contain it (`…abcd`, `svc-live-…abcd`). */
export function filterKeys(views: readonly KeyView[], q: string): KeyView[] {
  const needle = q.trim().toLowerCase();
  if (!needle) return [...views];
  const tail = needle.replace(/^svc-(live|test)-/, '').replace(/^…|^\.\.\./, '');
  return views.filter(
    (v) => v.record.name.toLowerCase().includes(needle) || (tail.length > 0 && v.record.last4.toLowerCase().includes(tail)),
  );
}

/** The keys in the chosen order; ties by creation then id, so the order is stable. */
export function sortKeys(views: KeyView[], sort: KeySort, dir: KeySortDir, nowMs: number): KeyView[] {
  const key = (v: KeyView): number | string =>
    sort === 'name'
      ? v.record.name.toLowerCase()
      : sort === 'last_used'
        ? (v.lastUsed ?? '')
        : sort === 'status'
          ? STATUS_ORDER[keyStatus(v.record, nowMs)]
          : v.record.created_at;
  const sign = dir === 'asc' ? 1 : -1;
  return views.sort((a, b) => {
    const x = key(a);
    const y = key(b);
    const c = x < y ? -1 : x > y ? 1 : 0;
    if (c !== 0) return sign * c;
    return a.record.created_at < b.record.created_at
      ? -1
      : a.record.created_at > b.record.created_at
        ? 1
        : a.record.id < b.record.id
          ? -1
          : 1;
  });
}

const PERIOD_WORDS: Record<string, string> = { day: 'today (UTC)', month: 'this month (UTC)', total: 'in total' };

/**
 * Spent vs limit: a `<meter>` (drawn by the browser, no style attribute: the CSP allows none) and the
 * figures in words. The meter turns amber past 80 % and red at the limit.
 */
export function budgetBar(b: BudgetView, id?: string): Html {
  const max = Math.max(b.limit_micros, 1);
  const value = Math.min(b.spent_micros, max);
  const pct = b.limit_micros === 0 ? 100 : Math.min(100, Math.floor((b.spent_micros * 100) / b.limit_micros));
  return html`<div class="budget" ${id ? html`id="${id}"` : ''}>
    <meter
      min="0"
      max="${max}"
      low="${Math.floor(max * 0.8)}"
      high="${Math.max(max - 1, 0)}"
      optimum="0"
      value="${value}"
      aria-label="Budget used: ${pct}%"
    >
      ${pct}%
    </meter>
    <span class="budget-text"
      ><span class="spent">${credits(b.spent_micros)}</span> of <span class="limit">${credits(b.limit_micros)}</span> credits
      ${PERIOD_WORDS[b.period] ?? b.period} (${pct}%)</span
    >
  </div>`;
}

/** The key's model allow-list in words: every model, or the list. */
export function modelsText(k: KeyRecord): string {
  return k.models.length === 0 ? 'all models' : k.models.join(', ');
}

/** The key's rate-limit override in words; without one its environment's defaults apply. */
export function rateText(k: KeyRecord): string {
  const r = k.rate_limits;
  const parts = [
    r?.requests_per_minute !== undefined && `${r.requests_per_minute} requests/min`,
    r?.tokens_per_minute !== undefined && `${r.tokens_per_minute} tokens/min`,
  ].filter(Boolean);
  return parts.length === 0 ? `${k.env} defaults` : parts.join(', ');
}

function statusBadge(k: KeyRecord, nowMs: number): Html {
  const s = keyStatus(k, nowMs);
  const until = s === 'active' && k.expires_at ? html`<span class="sub expires">expires ${stamp(k.expires_at)}</span>` : '';
  const since = s === 'expired' ? html`<span class="sub expires">since ${stamp(k.expires_at!)}</span>` : '';
  return html`<span class="badge ${s}">${s}</span> ${until}${since}`;
}

/** One row; every action swaps the row in place with htmx, or posts and redirects without it. */
export function keyRow(account: string, v: KeyView, nowMs: number): Html {
  const k = v.record;
  const action = accountPath(account, `/keys/${encodeURIComponent(k.id)}`);
  const swap = html`hx-post="${action}" hx-target="closest tr" hx-swap="outerHTML"`;
  const toggle = k.active
    ? html`<form
        method="post"
        action="${action}"
        ${swap}
        hx-confirm="Disable “${k.name}”? Every request with this key is refused from now on, on every instance."
      >
        <input type="hidden" name="action" value="disable" /><button class="small danger" type="submit">Disable</button>
      </form>`
    : html`<form method="post" action="${action}" ${swap} hx-confirm="Enable “${k.name}” again? Requests with this key are accepted again.">
        <input type="hidden" name="action" value="enable" /><button class="small" type="submit">Enable</button>
      </form>`;
  const status = keyStatus(k, nowMs);
  return html`<tr id="key-${k.id}" class="${status === 'active' ? '' : 'off'}" data-key-id="${k.id}" data-status="${status}">
    <td>
      <form class="inline" method="post" action="${action}" ${swap}>
        <input type="hidden" name="action" value="rename" />
        <input class="name" type="text" name="name" value="${k.name}" required maxlength="200" aria-label="Name of key ${k.id}" />
        <button class="small" type="submit">Rename</button>
      </form>
    </td>
    <td class="key"><span class="mono">svc-${k.env}-…${k.last4}</span><br /><span class="badge ${k.env}">${k.env}</span></td>
    <td class="hide-sm limits" title="Scopes, models, rate limits">
      <span class="scopes">${k.scopes.join(', ')}</span><br /><span class="models">${modelsText(k)}</span><br /><span class="sub rate"
        >${rateText(k)}</span
      >
    </td>
    <td class="budget-cell">${v.budget ? budgetBar(v.budget) : html`<span class="sub">no budget</span>`}</td>
    <td class="hide-sm">${stamp(k.created_at)}</td>
    <td class="last-used"><span class="show-sm">Last used </span>${v.lastUsed ? stamp(v.lastUsed) : 'never'}</td>
    <td class="status">${statusBadge(k, nowMs)}</td>
    <td class="actions">
      <div class="row-actions">
        ${toggle}
        <a class="button small" href="${action}" aria-label="Manage key ${k.name}">Manage</a>
      </div>
    </td>
  </tr>`;
}

function sortHeader(account: string, l: KeyListing, col: KeySort, cls = ''): Html {
  const active = l.sort === col;
  const dir: KeySortDir = active ? (l.dir === 'asc' ? 'desc' : 'asc') : KEY_FIRST_DIR[col];
  const params = new URLSearchParams({ ...(l.q && { q: l.q }), sort: col, dir });
  const arrow = active ? (l.dir === 'asc' ? ' ↑' : ' ↓') : '';
  return html`<th class="${cls}" ${active ? html`aria-sort="${l.dir === 'asc' ? 'ascending' : 'descending'}"` : ''}>
    <a class="sort" href="${accountPath(account, '/keys')}?${params.toString()}">${SORT_LABELS[col]}${arrow}</a>
  </th>`;
}

/** The table of keys, swapped as a whole (out of band) after a create. `total`: the account's keys before the search. */
export function keyTable(
  account: string,
  views: readonly KeyView[],
  nowMs: number,
  o: { oob?: boolean; listing?: KeyListing; total?: number } = {},
): Html {
  const l = o.listing ?? DEFAULT_LISTING;
  const total = o.total ?? views.length;
  return html`<section id="key-table" class="panel flush" ${o.oob ? html`hx-swap-oob="true"` : ''}>
    <form class="inline key-search" method="get" action="${accountPath(account, '/keys')}" role="search">
      <input type="search" name="q" value="${l.q}" placeholder="Search by name or last four" aria-label="Search keys" />
      <label class="row"
        >Sort by
        <select name="sort">
          ${KEY_SORTS.map((s) => html`<option value="${s}" ${s === l.sort ? html`selected` : ''}>${SORT_OPTIONS[s]}</option>`)}
        </select>
      </label>
      <button type="submit">Search</button>
      ${l.q ? html`<span class="sub">${views.length} of ${total} keys</span>` : ''}
    </form>
    <table class="cards">
      <thead>
        <tr>
          ${sortHeader(account, l, 'name')}
          <th>Key</th>
          <th class="hide-sm">Access</th>
          <th>Budget</th>
          ${sortHeader(account, l, 'created', 'hide-sm')} ${sortHeader(account, l, 'last_used')} ${sortHeader(account, l, 'status')}
          <th class="actions"><span class="hide-sm">Actions</span></th>
        </tr>
      </thead>
      <tbody id="key-rows">
        ${
          views.length === 0
            ? html`<tr>
                <td colspan="8" class="empty">
                  ${total === 0 ? 'No keys yet: create the first one above.' : 'No key matches the search.'}
                </td>
              </tr>`
            : views.map((v) => keyRow(account, v, nowMs))
        }
      </tbody>
    </table>
  </section>`;
}

/** The one-time dialog with the full key, a copy button and the handling advice. */
export function createdDialog(account: string, key: string, record: KeyRecord, previous?: KeyRecord): Html {
  return html`<dialog id="new-key" data-modal open aria-labelledby="new-key-title">
    <h2 id="new-key-title">Your new key “${record.name}”</h2>
    ${
      previous
        ? html`<p class="rolled">
            Rolled from <span class="mono">svc-${previous.env}-…${previous.last4}</span>: same account, scopes, models, rate limits and
            budget. The old key
            ${
              previous.expires_at
                ? html`works until <strong id="old-key-expires">${when(previous.expires_at)}</strong>`
                : html`keeps working`
            };
            deploy this one before then.
          </p>`
        : ''
    }
    <p>
      This is the only time the full key is shown. Copy it now and keep it in an environment variable or a secret store, never in source
      code, a repository or a chat message.
    </p>
    <div class="secret">
      <code id="new-key-value">${key}</code>
      <button type="button" data-copy="new-key-value">Copy</button>
    </div>
    <p class="warn">
      Tollgate keeps only a hash of this key: nobody can show it again, not even an operator. If it is lost, create a new key and disable
      this one.
    </p>
    <div class="dialog-actions">
      <a class="button primary" href="${accountPath(account, '/keys')}" data-close>I have saved it</a>
    </div>
  </dialog>`;
}

/** The page body: create form, dialog slot (filled on a create), and the table. */
export function keysBody(o: {
  account: string;
  /** The keys shown (searched and sorted), and how many the account has. */
  views: readonly KeyView[];
  total: number;
  listing: KeyListing;
  nowMs: number;
  notice?: string | undefined;
  operator: boolean;
  created?: Html | undefined;
  /** An account with no key and no ledger yet (an operator may have mistyped its id). */
  fresh?: boolean;
}): Html {
  const action = accountPath(o.account, '/keys');
  return html`<div class="head">
      <div>
        <h1>API keys</h1>
        <p class="sub">Keys of account <strong>${o.account}</strong>. A key is shown in full once, when it is created.</p>
      </div>
    </div>
    ${
      o.fresh
        ? html`<section class="panel confirm" id="unseen-account" role="alert">
            <h2>Account “${o.account}” does not exist yet</h2>
            <p>
              It has no keys, no credit and no ledger. If you meant another account, check the id or
              <a href="/console/accounts?q=${encodeURIComponent(o.account.slice(0, 4))}">search the accounts</a>. Creating a key here
              creates this account.
            </p>
          </section>`
        : ''
    }
    ${o.notice ? html`<div class="flash ok" id="notice">${o.notice}</div>` : ''} ${o.operator ? operatorTools(o.account) : ''}
    <section class="panel">
      <h2>Create a key</h2>
      <form class="stack" method="post" action="${action}" hx-post="${action}" hx-target="#dialog-slot" hx-swap="innerHTML">
        <label>Name <input type="text" name="name" required maxlength="200" placeholder="e.g. production backend" /></label>
        <label
          >Environment
          <select name="env">
            <option value="live">live: billed from credit</option>
            <option value="test">test: free, rate-limited</option>
          </select>
        </label>
        <fieldset>
          <legend>Scopes</legend>
          ${SCOPES.map((s) => html`<label><input type="checkbox" name="scopes" value="${s}" checked /> ${s}</label>`)}
        </fieldset>
        ${
          o.fresh
            ? html`<label class="row confirm-new"
                ><input type="checkbox" name="new_account" value="${o.account}" required /> Create the new account “${o.account}”</label
              >`
            : ''
        }
        <div><button class="primary" type="submit">Create key</button></div>
      </form>
    </section>
    <div id="dialog-slot">${o.created ?? ''}</div>
    ${keyTable(o.account, o.views, o.nowMs, { listing: o.listing, total: o.total })}`;
}

/**
 * Said on the keys page, where the create form is, when the account is at limits.max_keys_per_account
 * (429 `key_limit_exceeded`): what happened and what to do, in words, not an error card.
 */
export function keyLimitNotice(max: number | undefined): Html {
  const limit = max === undefined ? 'keys' : max === 1 ? '1 key' : `${max} keys`;
  return html`<div id="key-limit" class="flash error" role="alert">
    <strong>No key was created: this account has reached its limit of ${limit}.</strong>
    Disabled keys count too, because they still exist. Enable a disabled key again instead of creating a new one, or ask the platform's
    operator to raise the limit.
  </div>`;
}

/**
 * Said on the keys page instead when the account already made limits.max_keys_made_per_day keys today
 * (UTC; 429 `key_limit_exceeded` with retry-after): deleting a key makes no room, tomorrow does.
 */
export function keyDailyLimitNotice(max: number | undefined): Html {
  const limit = max === undefined ? 'keys' : max === 1 ? '1 key' : `${max} keys`;
  return html`<div id="key-limit" class="flash error" role="alert">
    <strong>No key was created: this account has made its limit of ${limit} today.</strong>
    Deleted and rolled keys count too, so deleting a key makes no room. Reuse one of the keys below, create the key after midnight UTC, or
    ask the platform's operator to raise the limit.
  </div>`;
}

/** A key-page form the server refused (422, or 429 for a roll past the daily key limit): which section, why, and what was typed in its text field. */
export interface KeyFormError {
  section: 'budget' | 'expiry' | 'roll';
  message: string;
  typed?: string | undefined;
}

/** The lifetimes offered for the old key after a roll (seconds; key-controls.ts allows 0..MAX_GRACE_SECONDS). */
export const ROLL_GRACES: readonly (readonly [number, string])[] = [
  [0, 'expires now'],
  [3600, 'works 1 more hour'],
  [86_400, 'works 24 more hours'],
  [7 * 86_400, 'works 7 more days'],
];

/** `2026-11-27T18:00:00.000Z` → `2026-11-27T18:00`, the value of a `datetime-local` input (read as UTC). */
function localValue(iso: string | null | undefined): string {
  return iso ? iso.slice(0, 16) : '';
}

/**
 * One key's page: what it is and may do (models, rate limits, scopes), its budget with the bar and the
 * form to set, change or remove it, its expiry, the roll with a grace period, and deletion with a
 * confirmation step. Plain forms that post and redirect: everything works without JavaScript.
 */
export function keyDetailBody(o: {
  account: string;
  view: KeyView;
  nowMs: number;
  notice?: string | undefined;
  /** The delete button was pressed once: ask before deleting. */
  confirmDelete?: boolean;
  /** A refused post (422): its message beside the form, and what was typed, kept. */
  refused?: KeyFormError | undefined;
}): Html {
  const k = o.view.record;
  const b = o.view.budget;
  const action = accountPath(o.account, `/keys/${encodeURIComponent(k.id)}`);
  const hidden = (a: string) => html`<input type="hidden" name="action" value="${a}" />`;
  const err = (section: KeyFormError['section']) =>
    o.refused?.section === section ? html`<p class="field-error" id="${section}-error" role="alert">${o.refused.message}</p>` : '';
  const invalid = (section: KeyFormError['section']) =>
    o.refused?.section === section ? html`aria-invalid="true" aria-describedby="${section}-error"` : '';
  const limitValue = o.refused?.section === 'budget' ? (o.refused.typed ?? '') : b ? credits(b.limit_micros) : '';
  const expiryValue = o.refused?.section === 'expiry' ? (o.refused.typed ?? '') : localValue(k.expires_at);
  return html`<div class="head">
      <div>
        <p class="sub"><a href="${accountPath(o.account, '/keys')}">← API keys</a></p>
        <h1>Key “${k.name}”</h1>
        <p class="sub"><span class="mono">svc-${k.env}-…${k.last4}</span> · ${statusBadge(k, o.nowMs)}</p>
      </div>
    </div>
    ${o.notice ? html`<div class="flash ok" id="notice">${o.notice}</div>` : ''}
    ${
      o.confirmDelete
        ? html`<section class="panel confirm" id="delete-confirm" role="alert">
            <h2>Delete “${k.name}” for good?</h2>
            <p>
              Every request with <span class="mono">svc-${k.env}-…${k.last4}</span> is refused from now on, on every instance, and the key
              leaves every list. It cannot be undone: disable the key instead if it may come back. Its ledger entries and usage stay.
            </p>
            <form class="inline" method="post" action="${action}">
              ${hidden('delete')}<input type="hidden" name="confirm" value="${k.id}" />
              <button class="danger" type="submit">Delete for good</button>
              <a class="button" href="${action}">Cancel</a>
            </form>
          </section>`
        : ''
    }
    <section class="panel">
      <h2>Access</h2>
      <dl class="facts" id="key-facts">
        <dt>Environment</dt>
        <dd><span class="badge ${k.env}">${k.env}</span></dd>
        <dt>Scopes</dt>
        <dd>${k.scopes.join(', ')}</dd>
        <dt>Models</dt>
        <dd class="models">${modelsText(k)}</dd>
        <dt>Rate limits</dt>
        <dd class="rate">${rateText(k)}</dd>
        <dt>Created</dt>
        <dd>${when(k.created_at)}</dd>
        <dt>Last used</dt>
        <dd>${o.view.lastUsed ? when(o.view.lastUsed) : 'never'}</dd>
      </dl>
    </section>
    <section class="panel" id="budget">
      <h2>Budget</h2>
      ${b ? budgetBar(b, 'budget-bar') : html`<p class="sub">No budget: the key may spend what the account's credit allows.</p>`}
      ${k.env === 'test' ? html`<p class="sub">Test keys are free: a budget on one is kept but never spent.</p>` : ''}
      <form class="inline" method="post" action="${action}">
        ${hidden('budget')}
        <label class="row"
          >Limit
          <input type="text" inputmode="decimal" name="limit" required maxlength="40" value="${limitValue}" ${invalid('budget')} />
          credits</label
        >
        <label class="row"
          >per
          <select name="period">
            ${BUDGET_PERIODS.map((p) => html`<option value="${p}" ${b?.period === p ? html`selected` : ''}>${p === 'total' ? 'total (the key’s whole life)' : `${p} (UTC)`}</option>`)}
          </select>
        </label>
        <button type="submit">${b ? 'Change budget' : 'Set budget'}</button>
      </form>
      ${err('budget')}
      ${
        b
          ? html`<form class="inline" method="post" action="${action}">
              ${hidden('unbudget')}<button class="small" type="submit">Remove budget</button>
            </form>`
          : ''
      }
    </section>
    <section class="panel" id="expiry">
      <h2>Expiry</h2>
      <p class="sub">
        ${
          k.expires_at
            ? isExpired(k, o.nowMs)
              ? html`Expired at ${when(k.expires_at)}: refused as expired on every instance.`
              : html`Expires at ${when(k.expires_at)}.`
            : 'Never expires.'
        }
      </p>
      <form class="inline" method="post" action="${action}">
        ${hidden('expire')}
        <label class="row"
          >Expires at <input type="datetime-local" name="expires_at" required value="${expiryValue}" ${invalid('expiry')} /> UTC</label
        >
        <button type="submit">Set expiry</button>
      </form>
      ${err('expiry')}
      <div class="inline-forms">
        ${
          k.expires_at
            ? html`<form class="inline" method="post" action="${action}">
                ${hidden('unexpire')}<button class="small" type="submit">Never expire</button>
              </form>`
            : ''
        }
        ${
          isExpired(k, o.nowMs)
            ? ''
            : html`<form class="inline" method="post" action="${action}">
                ${hidden('expire_now')}<button class="small danger" type="submit">Expire now</button>
              </form>`
        }
      </div>
    </section>
    <section class="panel" id="roll">
      <h2>Roll</h2>
      <p class="sub">
        A new key with the same account, environment, name, scopes, models, rate limits and budget, shown once. The old key keeps working
        for the grace period you choose, then expires everywhere.
      </p>
      <form class="inline" method="post" action="${action}">
        ${hidden('roll')}
        <label class="row"
          >The old key
          <select name="grace_seconds">
            ${ROLL_GRACES.map(([s, label]) => html`<option value="${s}" ${s === 86_400 ? html`selected` : ''}>${label}</option>`)}
          </select>
        </label>
        <button type="submit">Roll key</button>
      </form>
      ${err('roll')}
    </section>
    <section class="panel" id="delete">
      <h2>Delete</h2>
      <p class="sub">Removes the key for good. You are asked to confirm first.</p>
      <form class="inline" method="post" action="${action}">
        ${hidden('delete')}<button class="danger" type="submit">Delete key…</button>
      </form>
    </section>`;
}
