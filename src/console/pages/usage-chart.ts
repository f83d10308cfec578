/**
 * A server-rendered bar chart: inline SVG with presentation attributes and classes only (the console's
 * CSP forbids style attributes), one bar per day, stacked when a metric has parts (prompt + completion
 * tokens). No chart library: 30 bars and three gridlines are a few lines of arithmetic.
 */
import { html, type Html } from '../html.ts';

/** One stacked part of a bar: its CSS class (colour), its name in the legend and tooltips, a value per day. */
export interface Series {
  cls: string;
  label: string;
  values: readonly number[];
}

export interface ChartSpec {
  id: string;
  title: string;
  /** UTC days, oldest first; one bar each. */
  days: readonly string[];
  series: readonly Series[];
  /** How a value reads on the axis and in tooltips. */
  format: (n: number) => string;
}

// Geometry in viewBox units; the SVG scales to its box (console.css .chart svg), text with it.
const W = 340;
const H = 170;
// Room on the right for half the newest day's label ("Nov 25"), centred under the last bar.
const RIGHT = 20;
/** Axis text is 10 units high (console.css .chart .axis); a digit or letter is at most this wide. */
const CHAR_W = 6.2;

/** The width an axis label takes, over-estimated a little (digits are ~5.6 units in system fonts). */
export function labelWidth(text: string): number {
  return text.length * CHAR_W;
}
const TOP = 8;
const BOTTOM = 22;

/** The smallest 1, 2 or 5 × 10^k at or above `v` (at least 1), so the axis reads in round numbers. */
export function niceCeil(v: number): number {
  if (v <= 1) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** 950 → "950", 1200 → "1.2k", 3_400_000 → "3.4M": counts on an axis. */
export function compact(n: number): string {
  if (n < 1000) return String(n);
  const [d, s] = n < 1e6 ? [1e3, 'k'] : n < 1e9 ? [1e6, 'M'] : [1e9, 'G'];
  return `${Number((n / d).toFixed(1))}${s}`;
}

/** `2026-11-25` → `Nov 25`, for the x axis. */
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
export function shortDay(day: string): string {
  return `${MONTHS[Number(day.slice(5, 7)) - 1]} ${Number(day.slice(8, 10))}`;
}

/** A figure with a heading, a legend when stacked, and the SVG; bars only for days with a value. */
export function barChart(c: ChartSpec): Html {
  const n = c.days.length;
  const totals = c.days.map((_, i) => c.series.reduce((s, x) => s + x.values[i]!, 0));
  const max = niceCeil(Math.max(0, ...totals));
  // Whole units only: a credit axis formats integer micro-credits, a count axis reads 2.5 requests badly.
  const ticks = Number.isInteger(max / 2) ? [0, max / 2, max] : [0, max];
  // The plot starts after the widest value label (`0.000005`, `1000.5`), so none is cut at the edge.
  const left = Math.ceil(Math.max(...ticks.map((v) => labelWidth(c.format(v))))) + 9;
  const plotW = W - left - RIGHT;
  const plotH = H - TOP - BOTTOM;
  const slot = plotW / n;
  const barW = Math.max(1, slot * 0.72);
  const y = (v: number) => TOP + plotH - (v / max) * plotH;
  const r = (v: number) => Math.round(v * 10) / 10;

  const grid = ticks.map(
    (v) =>
      html`<line class="grid" x1="${left}" x2="${W - RIGHT}" y1="${r(y(v))}" y2="${r(y(v))}" />
        <text class="axis" x="${left - 5}" y="${r(y(v)) + 3}" text-anchor="end">${c.format(v)}</text>`,
  );
  // A label a week apart, counted back from today, so the newest day is always named.
  const labels = c.days.flatMap((day, i) =>
    (n - 1 - i) % 7 === 0
      ? [html`<text class="axis" x="${r(left + slot * (i + 0.5))}" y="${H - 6}" text-anchor="middle">${shortDay(day)}</text>`]
      : [],
  );
  const bars = c.days.flatMap((day, i) => {
    if (totals[i] === 0) return [];
    let base = 0;
    const parts = c.series.flatMap((s) => {
      const v = s.values[i]!;
      if (v === 0) return [];
      const top = y(base + v);
      const bottom = y(base);
      base += v;
      return [
        html`<rect
          class="${s.cls}"
          x="${r(left + slot * i + (slot - barW) / 2)}"
          y="${r(top)}"
          width="${r(barW)}"
          height="${r(Math.max(0.5, bottom - top))}"
        >
          <title>${day}: ${c.format(v)} ${s.label}</title>
        </rect>`,
      ];
    });
    return [html`<g class="bar" data-day="${day}" data-value="${totals[i]!}">${parts}</g>`];
  });
  const legend =
    c.series.length > 1
      ? html`<ul class="legend">
          ${c.series.map(
            (s) =>
              html`<li>
                <svg viewBox="0 0 10 10" aria-hidden="true"><rect class="${s.cls}" width="10" height="10" rx="2" /></svg>${s.label}
              </li>`,
          )}
        </ul>`
      : '';
  return html`<figure class="chart" id="${c.id}">
    <figcaption>${c.title}</figcaption>
    <svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${c.title} per day, ${c.days[0]} to ${c.days.at(-1)}">${grid}${bars}${labels}</svg>
    ${legend}
  </figure>`;
}
