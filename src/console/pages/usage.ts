/**
 * The usage page (SPEC §9, §10): requests, tokens and cost per UTC day over the last 30 days, as three
 * bar charts and the table of day × key × model rows beneath them, filtered by key and model with a
 * plain GET form. The rows are the usage service's (the admin API's `group_by=day,key,model` read);
 * this page only filters them and sums them per day for the charts.
 */
import type { KeyRecord } from '../../store/types.ts';
import type { UsageRow } from '../../usage/usage.ts';
import { html, type Html } from '../html.ts';
import { accountPath } from '../layout.ts';
import { credits, keyLabel } from './credit.ts';
import { barChart, compact } from './usage-chart.ts';

/** The table shows at most this many rows (the newest); the charts and totals sum every row read. */
export const USAGE_TABLE_ROWS = 1000;

export interface UsageView {
  account: string;
  /** The page's period, oldest first (the last 30 days, today included). */
  period: readonly string[];
  /** The newest days of the period that were read and are charted, oldest first. */
  days: readonly string[];
  /** Older days of the period left unread: their counters and the newer days' passed `maxFields`. */
  omittedDays: number;
  maxFields: number;
  /** Rows grouped by day, key and model, already filtered. */
  rows: readonly UsageRow[];
  /** What the filters can choose from: the account's keys, and the models used in the period. */
  keys: readonly KeyRecord[];
  models: readonly string[];
  key: string | undefined;
  model: string | undefined;
}

/** `UTC days from..to` ending on `today`, oldest first. */
export function lastDays(today: string, n: number): string[] {
  const end = Date.parse(`${today}T00:00:00Z`);
  return Array.from({ length: n }, (_, i) => new Date(end - (n - 1 - i) * 86_400_000).toISOString().slice(0, 10));
}

function filters(v: UsageView): Html {
  const option = (value: string, label: string, selected: boolean) =>
    html`<option value="${value}" ${selected ? html`selected` : ''}>${label}</option>`;
  return html`<form class="filters" method="get" action="${accountPath(v.account, '/usage')}">
    <label
      >Key
      <select name="key">
        ${option('', 'All keys', v.key === undefined)} ${v.keys.map((k) => option(k.id, `${k.name} (…${k.last4})`, k.id === v.key))}
      </select>
    </label>
    <label
      >Model
      <select name="model">
        ${option('', 'All models', v.model === undefined)} ${v.models.map((m) => option(m, m, m === v.model))}
      </select>
    </label>
    <button type="submit">Apply</button>
    ${v.key !== undefined || v.model !== undefined ? html`<a href="${accountPath(v.account, '/usage')}">Clear</a>` : ''}
  </form>`;
}

export function usageBody(v: UsageView): Html {
  const index = new Map(v.days.map((d, i) => [d, i]));
  const per = (f: (r: UsageRow) => number) => {
    const out = v.days.map(() => 0);
    for (const r of v.rows) out[index.get(r.day!)!]! += f(r);
    return out;
  };
  const requests = per((r) => r.requests);
  const prompt = per((r) => r.prompt_tokens);
  const completion = per((r) => r.completion_tokens);
  const cost = per((r) => r.cost_micros);
  const sum = (a: number[]) => a.reduce((s, x) => s + x, 0);
  const names = new Map(v.keys.map((k) => [k.id, k]));
  const filtered = v.key !== undefined || v.model !== undefined;
  const counters = v.maxFields.toLocaleString('en-US');
  const emptyWhen = v.omittedDays > 0 ? `from ${v.days[0]} to ${v.days.at(-1)}` : 'in the last 30 days';
  const partial =
    v.omittedDays > 0 && v.days.length > 0
      ? html`<p class="sub" id="usage-partial">
          Only ${v.days[0]} to ${v.days.at(-1)} are shown: with the ${v.omittedDays} older days, this account's usage holds more than
          ${counters} counters (one per day, key, model and figure), more than this page reads at once. The operator can read any range
          (<code>tollgate usage show</code>).
        </p>`
      : '';

  const head = html`<div class="head">
      <div>
        <h1>Usage</h1>
        <p class="sub">
          Requests, tokens and cost of account <strong>${v.account}</strong> per UTC day, ${v.period[0]} to ${v.period.at(-1)}. Figures may
          lag the ledger by a few seconds; the ledger is the record.
        </p>
        ${partial}
      </div>
    </div>
    ${filters(v)}`;
  if (v.days.length === 0)
    return html`${head}
      <section class="panel" id="usage-too-large">
        <h2>Too much usage to show here</h2>
        <p class="sub">
          Today's usage alone holds more than ${counters} counters (one per key, model and figure), more than this page reads at once. The
          operator can read it (<code>tollgate usage show --group-by key</code> or <code>--group-by model</code>).
        </p>
      </section>`;
  if (v.rows.length === 0)
    return html`${head}
      <section class="panel" id="usage-empty">
        <h2>No usage ${filtered ? 'for this filter ' : ''}${emptyWhen}</h2>
        <p class="sub">Requests made with this account's keys appear here within a few seconds.</p>
      </section>`;

  return html`${head}
    <div class="figures totals">
      <div class="figure">
        <div class="label">Requests</div>
        <div class="value" id="total-requests">${sum(requests)}</div>
      </div>
      <div class="figure">
        <div class="label">Tokens in / out</div>
        <div class="value" id="total-tokens">${compact(sum(prompt))} / ${compact(sum(completion))}</div>
      </div>
      <div class="figure">
        <div class="label">Cost (credits)</div>
        <div class="value" id="total-cost">${credits(sum(cost))}</div>
      </div>
    </div>
    <section class="panel charts">
      ${barChart({ id: 'chart-requests', title: 'Requests', days: v.days, series: [{ cls: 's1', label: 'requests', values: requests }], format: compact })}
      ${barChart({
        id: 'chart-tokens',
        title: 'Tokens',
        days: v.days,
        series: [
          { cls: 's1', label: 'prompt tokens', values: prompt },
          { cls: 's2', label: 'completion tokens', values: completion },
        ],
        format: compact,
      })}
      ${barChart({ id: 'chart-cost', title: 'Cost (credits)', days: v.days, series: [{ cls: 's3', label: 'credits', values: cost }], format: credits })}
    </section>
    <section class="panel flush">
      <h2>Per day, key and model</h2>
      ${
        v.rows.length > USAGE_TABLE_ROWS
          ? html`<p class="sub" id="usage-table-cut">
              The newest ${USAGE_TABLE_ROWS} of ${v.rows.length} rows are listed; the totals and charts count them all. Filter by key or
              model to list others.
            </p>`
          : ''
      }
      <table id="usage-rows" class="kv">
        <thead>
          <tr>
            <th>Day</th>
            <th>Key</th>
            <th>Model</th>
            <th class="num">Requests</th>
            <th class="num">Tokens in</th>
            <th
              class="num"
              title="The part of tokens in the upstream served from its prompt cache, priced at the model's cached-input price"
            >
              Cached
            </th>
            <th class="num">Tokens out</th>
            <th class="num">Credits</th>
          </tr>
        </thead>
        <tbody>
          ${v.rows
            .slice(-USAGE_TABLE_ROWS)
            .reverse()
            .map(
              (r) =>
                html`<tr data-day="${r.day}" data-key-id="${r.key_id}" data-model="${r.model}">
                  <td class="when">${r.day}</td>
                  <td class="key">${keyLabel(r.key_id!, names)}</td>
                  <td class="model">${r.model}</td>
                  <td class="num" data-label="Requests">${r.requests}</td>
                  <td class="num" data-label="In">${r.prompt_tokens}</td>
                  <td class="num cached" data-label="Cached">${r.cached_tokens}</td>
                  <td class="num" data-label="Out">${r.completion_tokens}</td>
                  <td class="num credits" data-label="Credits">${credits(r.cost_micros)}</td>
                </tr>`,
            )}
        </tbody>
      </table>
    </section>`;
}
