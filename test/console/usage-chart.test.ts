// The usage page's SVG bar chart on its own: round axis maxima, whole-unit gridlines (a credit axis
// formats integer micro-credits), bars only for days with a value, stacked parts, and nothing the
// console's CSP forbids.
import t from 'tap';
import { formatCredits } from '../../src/credit/money.ts';
import { barChart, compact, labelWidth, niceCeil, shortDay } from '../../src/console/pages/usage-chart.ts';

const days = ['2026-11-23', '2026-11-24', '2026-11-25'];
const axis = (svg: string) => [...svg.matchAll(/<text class="axis"[^>]*text-anchor="end">([^<]*)<\/text>/g)].map((m) => m[1]);

t.test('niceCeil: the next 1, 2 or 5 × 10^k', async (t) => {
  t.same([0, 1, 2, 3, 7, 10, 11, 199, 201, 4_999_999].map(niceCeil), [1, 1, 2, 5, 10, 10, 20, 200, 500, 5_000_000]);
});

t.test('compact counts and short days', async (t) => {
  t.same([0, 950, 1000, 1250, 3_400_000, 2e9].map(compact), ['0', '950', '1k', '1.3k', '3.4M', '2G']);
  t.equal(shortDay('2026-01-05'), 'Jan 5');
});

t.test('a credit axis whose maximum is odd gets no half gridline (no fractional micro-credit)', async (t) => {
  const one = barChart({
    id: 'c',
    title: 'Cost',
    days,
    series: [{ cls: 's3', label: 'credits', values: [0, 1, 0] }],
    format: formatCredits,
  });
  t.same(axis(one.value), ['0', '0.000001']);
  const five = barChart({
    id: 'c',
    title: 'Cost',
    days,
    series: [{ cls: 's3', label: 'credits', values: [3, 0, 0] }],
    format: formatCredits,
  });
  t.same(axis(five.value), ['0', '0.000005']);
  const ten = barChart({
    id: 'c',
    title: 'Cost',
    days,
    series: [{ cls: 's3', label: 'credits', values: [7, 0, 0] }],
    format: formatCredits,
  });
  t.same(axis(ten.value), ['0', '0.000005', '0.00001']);
});

t.test('bars for days with a value only, parts stacked bottom up, the tallest reaching the top', async (t) => {
  const svg = barChart({
    id: 'tok',
    title: 'Tokens',
    days,
    series: [
      { cls: 's1', label: 'prompt', values: [0, 30, 10] },
      { cls: 's2', label: 'completion', values: [0, 20, 0] },
    ],
    format: compact,
  }).value;
  const bars = [...svg.matchAll(/<g class="bar" data-day="([^"]+)" data-value="(\d+)">([\s\S]*?)<\/g>/g)];
  t.same(
    bars.map((b) => [b[1], +b[2]!]),
    [
      ['2026-11-24', 50],
      ['2026-11-25', 10],
    ],
  );
  const rects = (s: string) => [...s.matchAll(/<rect\s+class="(s\d)"\s+x="[^"]+"\s+y="([^"]+)"\s+width="[^"]+"\s+height="([^"]+)"/g)];
  const [prompt, completion] = rects(bars[0]![3]!);
  t.equal(prompt![1], 's1');
  t.equal(completion![1], 's2');
  t.equal(+completion![2]! + +completion![3]!, +prompt![2]!, 'completion sits on top of prompt');
  t.equal(+completion![2]!, 8, 'max 50 is the top of the plot');
  t.match(svg, /<title>2026-11-24: 30 prompt<\/title>/, 'a tooltip per part');
  t.match(svg, /<ul class="legend">[\s\S]*prompt[\s\S]*completion/);
  t.notMatch(svg, /style=/, 'no style attribute (CSP)');
});

t.test('no axis label is cut at the edge of the chart, however long the values', async (t) => {
  const month = Array.from({ length: 30 }, (_, i) => new Date(Date.UTC(2026, 10, 25) - (29 - i) * 86_400_000).toISOString().slice(0, 10));
  for (const [peak, format] of [
    [1, formatCredits],
    [3, formatCredits],
    [1_234_567_891, formatCredits],
    [987_654_321_000, formatCredits],
    [7, compact],
    [3_400_000_000, compact],
  ] as const) {
    const svg = barChart({
      id: 'c',
      title: 'Cost',
      days: month,
      series: [{ cls: 's3', label: 'credits', values: month.map((_, i) => (i === 29 ? peak : 0)) }],
      format,
    }).value;
    const width = Number(/viewBox="0 0 (\d+)/.exec(svg)![1]);
    for (const m of svg.matchAll(/<text class="axis" x="([\d.]+)" y="[\d.]+" text-anchor="(end|middle)">([^<]*)<\/text>/g)) {
      const x = Number(m[1]);
      const w = labelWidth(m[3]!);
      const [from, to] = m[2] === 'end' ? [x - w, x] : [x - w / 2, x + w / 2];
      t.ok(from >= 0 && to <= width, `"${m[3]}" (${from.toFixed(1)}..${to.toFixed(1)}) inside 0..${width}`);
    }
    const gridStart = Number(/<line class="grid" x1="([\d.]+)"/.exec(svg)![1]);
    const longest = Math.max(...[...svg.matchAll(/text-anchor="end">([^<]*)</g)].map((m) => labelWidth(m[1]!)));
    t.ok(gridStart >= longest, `the plot starts after the widest value label (${gridStart} ≥ ${longest.toFixed(1)})`);
  }
});
