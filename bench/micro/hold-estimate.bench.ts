/**
 * Cost of the credit-hold prompt estimate on a 32 KB prompt (target ≤ 50 µs), next to the exact
 * tokenizer count it replaces on the request path. Run: `node bench/micro/hold-estimate.bench.ts`.
 */
import { estimatePromptTokens } from '../../src/credit/hold-estimate.ts';
import { createTokenizer } from '../../src/meter/tokenizer.ts';
import { createReport, nsPerOp } from './timing.ts';

const prose = 'The committee reviewed the proposal in detail and, after a long discussion about costs, agreed to revisit it next quarter. ';
const single = { model: 'm', messages: [{ role: 'user', content: prose.repeat(Math.ceil(32768 / prose.length)).slice(0, 32768) }] };
const turns = {
  model: 'm',
  messages: Array.from({ length: 40 }, (_, i) => ({
    role: i === 0 ? 'system' : i % 2 ? 'user' : 'assistant',
    content: prose.repeat(6) + `turn ${i} é 日本`,
  })),
};
const cjk = {
  model: 'm',
  messages: [{ role: 'user', content: '東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。'.repeat(360) }],
};

const tok = createTokenizer();
const t0 = performance.now();
await tok.load();
const loadMs = performance.now() - t0;

const report = createReport();
for (const [name, body] of [
  ['32 KB, 1 message', single],
  ['~32 KB, 40 turns', turns],
  ['~32 KB CJK', cjk],
] as const) {
  const raw = Buffer.byteLength(JSON.stringify(body));
  const hold = estimatePromptTokens(body, raw);
  const real = tok.countPromptTokens(body.messages);
  report.add(
    `estimatePromptTokens, ${name}`,
    nsPerOp(() => estimatePromptTokens(body, raw), 20_000, 2_000) / 1e3,
    'µs/op',
    `hold ${hold} vs ${real} tokens (×${(hold / real).toFixed(2)}), ${raw} B`,
  );
  report.add(`tokenizer.countPromptTokens, ${name}`, nsPerOp(() => tok.countPromptTokens(body.messages), 50, 10, 3) / 1e3, 'µs/op');
}
report.add('tokenizer load() incl. warm-up', loadMs * 1e3, 'µs/op', '(once per process)');
report.print();
