/**
 * The ratios as a chart (hand-written SVG, no dependency): req/s of each target relative to direct,
 * and relative to the bare proxy with the issue's targets marked, one bar group per scenario.
 */
import type { Report, Row } from './report.ts';
import { SCENARIOS, type ScenarioId } from './scenarios.ts';

const COLORS: Record<string, string> = {
  bare: '#9a9a9a',
  'bare+redis': '#c9b27c',
  'tollgate/test': '#4e79a7',
  'tollgate/live': '#e8731a',
  'tollgate/live-w2': '#b5521b',
};
/** The issue's req/s targets for the live key, relative to the bare proxy. */
const LIVE_TARGET: Partial<Record<ScenarioId, number>> = { nonstream: 0.7, stream64: 0.85, slow1000: 0.95 };
const THROUGHPUT: ScenarioId[] = ['nonstream', 'stream64', 'slow1000', 'prompt32k'];

const W = 820;
const LABEL_W = 250;
const BAR_H = 13;
const GAP = 3;
const GROUP_GAP = 14;
const PLOT_W = W - LABEL_W - 70;

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function panel(rows: Row[], y0: number, title: string, key: 'vsDirect' | 'vsBare', targets: string[], out: string[]): number {
  const vals = rows
    .filter((r) => targets.includes(r.target))
    .map((r) => r[key])
    .filter(Number.isFinite);
  const max = Math.max(1.1, ...vals) * 1.05;
  const x = (v: number) => LABEL_W + (v / max) * PLOT_W;
  out.push(`<text x="10" y="${y0 + 16}" font-size="14" font-weight="bold">${esc(title)}</text>`);
  let y = y0 + 30;
  const top = y;
  for (const id of THROUGHPUT) {
    const group = targets.map((t) => rows.find((r) => r.scenario === id && r.target === t)).filter((r): r is Row => r !== undefined);
    if (group.length === 0) continue;
    const h = group.length * (BAR_H + GAP);
    out.push(`<text x="10" y="${y + h / 2 + 4}" font-size="12">${esc(SCENARIOS.find((s) => s.id === id)!.title)}</text>`);
    for (const r of group) {
      const v = r[key];
      const wBar = Number.isFinite(v) ? Math.max(1, x(v) - LABEL_W) : 0;
      out.push(`<rect x="${LABEL_W}" y="${y}" width="${wBar.toFixed(1)}" height="${BAR_H}" fill="${COLORS[r.target]}"/>`);
      out.push(
        `<text x="${(LABEL_W + wBar + 4).toFixed(1)}" y="${y + BAR_H - 2}" font-size="11">${Number.isFinite(v) ? v.toFixed(2) : '–'}×</text>`,
      );
      if (key === 'vsBare' && r.target === 'tollgate/live' && LIVE_TARGET[id] !== undefined) {
        const tx = x(LIVE_TARGET[id]!);
        out.push(`<line x1="${tx.toFixed(1)}" x2="${tx.toFixed(1)}" y1="${y - 2}" y2="${y + BAR_H + 2}" stroke="#c00" stroke-width="2"/>`);
      }
      y += BAR_H + GAP;
    }
    y += GROUP_GAP;
  }
  const one = x(1);
  out.push(
    `<line x1="${one.toFixed(1)}" x2="${one.toFixed(1)}" y1="${top - 4}" y2="${y - GROUP_GAP + 2}" stroke="#333" stroke-dasharray="4 3"/>`,
  );
  out.push(`<text x="${one.toFixed(1)}" y="${top - 7}" font-size="10" text-anchor="middle">1.0</text>`);
  out.push(`<line x1="${LABEL_W}" x2="${LABEL_W}" y1="${top - 4}" y2="${y - GROUP_GAP + 2}" stroke="#333"/>`);
  return y;
}

/** The SVG document. */
export function toSvg(r: Report): string {
  const out: string[] = [];
  let y = panel(
    r.rows,
    0,
    'req/s relative to direct (the simulator alone)',
    'vsDirect',
    ['bare', 'bare+redis', 'tollgate/test', 'tollgate/live', 'tollgate/live-w2'],
    out,
  );
  y = panel(
    r.rows,
    y + 6,
    "req/s relative to the bare proxy (red tick: the issue's target for the live key)",
    'vsBare',
    ['bare+redis', 'tollgate/test', 'tollgate/live', 'tollgate/live-w2'],
    out,
  );
  let lx = 10;
  for (const [name, color] of Object.entries(COLORS)) {
    if (!r.rows.some((x) => x.target === name)) continue;
    out.push(
      `<rect x="${lx}" y="${y + 4}" width="12" height="12" fill="${color}"/><text x="${lx + 16}" y="${y + 14}" font-size="12">${esc(name)}</text>`,
    );
    lx += 130;
  }
  const m = r.meta;
  // Its own line: beside a legend of four targets it ran past the chart's width.
  out.push(
    `<text x="10" y="${y + 34}" font-size="11" fill="#555">${esc(`Node ${m.node}, ${m.cpus} CPUs, ${m.store}, ${m.commit}, ${m.mode}`)}</text>`,
  );
  const h = y + 46;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${h}" viewBox="0 0 ${W} ${h}" font-family="sans-serif">\n<rect width="100%" height="100%" fill="#fff"/>\n${out.join('\n')}\n</svg>\n`;
}
