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

function tokens(e: LedgerEntry): string {
  if (e.prompt_tokens === undefined && e.completion_tokens === undefined) return '';
  return `${e.prompt_tokens ?? '?'} / ${e.completion_tokens ?? '?'}${e.usage_source === 'estimated' ? ' (est.)' : ''}`;
}

/** The grant form; its idempotency key is drawn when the form is rendered, so submitting it twice grants once. */
function grantForm(account: string): Html {
  return html`<section class="panel">
    <h2>Grant credit</h2>
    <form class="stack" method="post" action="${accountPath(account, '/credit')}">
      <input type="hidden" name="idempotency_key" value="console-${randomUUID()}" />
      <label>Amount (credits; negative corrects) <input type="text" name="amount" inputmode="decimal" required placeholder="10.5" /></label>
      <label>Note <input type="text" name="note" maxlength="1000" placeholder="e.g. invoice 2026-11" /></label>
      <div><button class="primary" type="submit">Grant</button></div>
    </form>
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
    ${v.operator ? grantForm(v.account) : ''}
    <section class="panel flush">
      <h2>Ledger</h2>
      <table id="ledger">
        <thead>
          <tr>
            <th>When</th>
            <th>Kind</th>
            <th class="num">Credits</th>
            <th class="hide-sm">Model</th>
            <th class="hide-sm num">Tokens in / out</th>
            <th class="hide-sm">Key</th>
            <th class="hide-sm">Note or request</th>
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
                      <td class="num">${amount(e.amount_micros)}</td>
                      <td class="hide-sm model">${e.model ?? ''}</td>
                      <td class="hide-sm num">${tokens(e)}</td>
                      <td class="hide-sm mono">${e.key_id ?? ''}</td>
                      <td class="hide-sm">${e.note ?? html`<span class="mono">${e.request_id ?? ''}</span>`}</td>
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
