/** The credit page (SPEC §9): balance and held credit, the ledger newest first, and the operator's grant form. */
import { randomUUID } from 'node:crypto';
import type { AccountState, LedgerEntry } from '../../store/types.ts';
import { formatCredits } from '../../credit/money.ts';
import { html, type Html } from '../html.ts';
import { accountPath, when } from '../layout.ts';

/** Micro-credits as credits, exact (no floating point: SPEC §4). */
export function credits(micros: number): string {
  return formatCredits(micros);
}

function amount(micros: number): Html {
  const cls = micros < 0 ? 'neg' : micros > 0 ? 'pos' : '';
  return html`<span class="amount ${cls}">${micros > 0 ? '+' : ''}${credits(micros)}</span>`;
}

const NO_NAMES: ReadonlyMap<string, { name: string; last4: string }> = new Map();

/** A key as people know it: its name and last four characters; the id when the key is not (or no longer) listed. */
export function keyLabel(id: string, names: ReadonlyMap<string, { name: string; last4: string }>): Html {
  const k = names.get(id);
  return k ? html`<span title="${id}">${k.name} <span class="mono muted">…${k.last4}</span></span>` : html`<span class="mono">${id}</span>`;
}

function tokens(e: LedgerEntry): string {
  if (e.prompt_tokens === undefined && e.completion_tokens === undefined) return '';
  return `${e.prompt_tokens ?? '?'} / ${e.completion_tokens ?? '?'}${e.usage_source === 'estimated' ? ' (est.)' : ''}`;
}

/** What the operator typed into the grant form, and what was wrong with it: the page is drawn again with both. */
export interface GrantDraft {
  amount: string;
  note: string;
  /** Kept across a refused post: nothing was granted, and a resubmit must still grant once. */
  idempotencyKey: string;
  /** Messages by field (`amount`, `note`) and `form` for the rest. */
  errors: Readonly<Record<string, string>>;
  /** Set when the amount needs a confirmation: the micro-credits it would grant. */
  confirm?: number | undefined;
  /** The account has no key and no ledger yet: the grant would create it (a typo?), so it is confirmed too. */
  newAccount?: boolean | undefined;
}

/** Threshold of the confirmation step (config console.confirm_grant_credits), in micro-credits. */
function confirmPanel(account: string, d: GrantDraft, aboveMicros: number): Html {
  const micros = d.confirm!;
  return html`<section class="panel confirm" id="grant-confirm" role="alertdialog" aria-labelledby="grant-confirm-title">
    <h2 id="grant-confirm-title">Confirm this ${micros < 0 ? 'correction' : 'grant'}</h2>
    <p>
      ${micros < 0 ? 'Take' : 'Grant'}
      <strong class="amount ${micros < 0 ? 'neg' : 'pos'}">${credits(Math.abs(micros))} credits</strong> ${micros < 0 ? 'from' : 'to'}
      account <strong>${account}</strong>${d.note ? html` (note “${d.note}”)` : ''}?
      ${
        d.newAccount
          ? html`<strong>Account “${account}” does not exist yet</strong> (no keys, no ledger): this grant creates it; check the id.`
          : ''
      }
      ${Math.abs(micros) > aboveMicros ? html`Amounts above ${credits(aboveMicros)} credits are confirmed before they are booked.` : ''}
    </p>
    <form class="inline" method="post" action="${accountPath(account, '/credit')}">
      <input type="hidden" name="idempotency_key" value="${d.idempotencyKey}" />
      <input type="hidden" name="amount" value="${d.amount}" />
      <input type="hidden" name="note" value="${d.note}" />
      <input type="hidden" name="confirm" value="${micros}" />
      <button class="primary" type="submit">Yes, ${micros < 0 ? 'take' : 'grant'} ${credits(Math.abs(micros))} credits</button>
      <a class="button" href="${accountPath(account, '/credit')}">Cancel</a>
    </form>
    <p class="sub">Or change the amount below and grant again.</p>
  </section>`;
}

function fieldError(id: string, message: string | undefined): Html {
  return message ? html`<span class="field-error" id="${id}-error">${message}</span>` : html``;
}

/**
 * The grant form; its idempotency key is drawn when the form is rendered, so submitting it twice grants
 * once. After a refused post it is drawn again with what was typed and the message beside the field.
 */
function grantForm(account: string, d: GrantDraft | undefined, aboveMicros: number): Html {
  const e = d?.errors ?? {};
  const invalid = (f: string) => (e[f] ? html`aria-invalid="true" aria-describedby="${f}-error"` : '');
  return html`${d?.confirm !== undefined ? confirmPanel(account, d, aboveMicros) : ''}
    <section class="panel" id="grant">
      <h2>Grant credit</h2>
      ${e.form ? html`<div class="flash error" role="alert" id="grant-error">${e.form}</div>` : ''}
      <form class="stack" method="post" action="${accountPath(account, '/credit')}">
        <input type="hidden" name="idempotency_key" value="${d?.idempotencyKey || `console-${randomUUID()}`}" />
        <label
          >Amount (credits; negative corrects)
          <input
            type="text"
            name="amount"
            inputmode="decimal"
            required
            placeholder="10.5"
            value="${d?.amount ?? ''}"
            ${invalid('amount')}
          />
          ${fieldError('amount', e.amount)}
        </label>
        <label
          >Note
          <input type="text" name="note" maxlength="1000" placeholder="e.g. invoice 2026-11" value="${d?.note ?? ''}" ${invalid('note')} />
          ${fieldError('note', e.note)}
        </label>
        <div><button class="primary" type="submit">Grant</button></div>
      </form>
      <p class="sub">Grants above ${credits(aboveMicros)} credits ask for a confirmation first.</p>
    </section>`;
}

export interface CreditView {
  account: string;
  state: AccountState;
  entries: readonly LedgerEntry[];
  /** The `before` cursor of the next (older) page, when there is one. */
  older: string | undefined;
  /** True on a page after the first. */
  paged: boolean;
  operator: boolean;
  notice?: string | undefined;
  /** The grant form as typed, after a refused or unconfirmed post. */
  draft?: GrantDraft | undefined;
  /** Grants above this (micro-credits, absolute) are confirmed first. */
  confirmAboveMicros?: number;
  /** An operator viewing an account with no key and no ledger yet (maybe a typo). */
  fresh?: boolean;
  /** key id → the key, so the ledger names keys as the usage page does. */
  keyNames?: ReadonlyMap<string, { name: string; last4: string }>;
}

export function creditBody(v: CreditView): Html {
  const s = v.state;
  const base = accountPath(v.account, '/credit');
  return html`<div class="head">
      <div>
        <h1>Credit</h1>
        <p class="sub">
          Balance of account <strong>${v.account}</strong>, in credits. Requests hold credit while they run and settle when they end.
        </p>
      </div>
      <a class="button" href="${accountPath(v.account, '/ledger.csv')}" download>Download ledger (CSV)</a>
    </div>
    ${v.notice ? html`<div class="flash ok" role="status">${v.notice}</div>` : ''}
    <div class="figures">
      <div class="figure">
        <div class="label">Balance</div>
        <div class="value" id="balance">${credits(s.balance_micros)}</div>
      </div>
      <div class="figure">
        <div class="label">Held by requests in flight</div>
        <div class="value" id="held">${credits(s.held_micros)}</div>
      </div>
      <div class="figure">
        <div class="label">Available</div>
        <div class="value">${credits(s.balance_micros - s.held_micros)}</div>
      </div>
    </div>
    ${
      v.fresh
        ? html`<section class="panel confirm" id="unseen-account" role="alert">
            <h2>Account “${v.account}” does not exist yet</h2>
            <p>It has no keys and no ledger. A grant here creates it, after a confirmation; check the id first.</p>
          </section>`
        : ''
    }
    ${v.operator ? grantForm(v.account, v.draft, v.confirmAboveMicros ?? 1000 * 1_000_000) : ''}
    <section class="panel flush">
      <h2>Ledger</h2>
      <table id="ledger" class="kv">
        <thead>
          <tr>
            <th>When</th>
            <th>Kind</th>
            <th class="num">Credits</th>
            <th>Model</th>
            <th class="num">Tokens in / out</th>
            <th>Key</th>
            <th>Note or request</th>
          </tr>
        </thead>
        <tbody>
          ${
            v.entries.length === 0
              ? html`<tr>
                  <td colspan="7" class="empty">No entries yet.</td>
                </tr>`
              : v.entries.map(
                  (e) =>
                    html`<tr data-entry="${e.id}">
                      <td class="when">${when(e.ts)}</td>
                      <td><span class="badge">${e.kind.replace('_', ' ')}</span></td>
                      <td class="num credits" data-label="Credits">${amount(e.amount_micros)}</td>
                      <td class="model" data-label="Model">${e.model ?? ''}</td>
                      <td class="num" data-label="Tokens in / out">${tokens(e)}</td>
                      <td class="key" data-label="Key">${e.key_id ? keyLabel(e.key_id, v.keyNames ?? NO_NAMES) : ''}</td>
                      <td class="note">
                        ${e.note ?? (e.request_id ? html`<span class="mono request" title="${e.request_id}">${e.request_id}</span>` : '')}
                      </td>
                    </tr>`,
                )
          }
        </tbody>
      </table>
      ${
        v.paged || v.older
          ? html`<div class="pager">
              ${v.paged ? html`<a href="${base}">← Newest</a>` : html`<span></span>`}
              ${v.older ? html`<a href="${base}?before=${v.older}" rel="next">Older →</a>` : ''}
            </div>`
          : ''
      }
    </section>`;
}

const CSV_COLUMNS = [
  'id',
  'ts',
  'kind',
  'amount_micros',
  'request_id',
  'key_id',
  'model',
  'prompt_tokens',
  'completion_tokens',
  'usage_source',
  'hold_micros',
  'note',
  'cached_tokens',
] as const;

/** RFC 4180 quoting, and a leading ' on cells a spreadsheet would run as a formula (notes are free text). */
function csvCell(v: unknown): string {
  if (v === undefined || v === null) return '';
  let s = String(v);
  if (/^[=+\-@\t\r]/.test(s) && typeof v === 'string') s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

export const CSV_HEADER = `${CSV_COLUMNS.join(',')}\r\n`;

/** One ledger entry as a CSV line. */
export function csvLine(e: LedgerEntry): string {
  return `${CSV_COLUMNS.map((c) => csvCell(e[c])).join(',')}\r\n`;
}
