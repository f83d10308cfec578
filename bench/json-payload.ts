// How much building the upstream payload costs next to parsing the body, for 4 MiB bodies of several
// shapes (SPEC §13: "building the upstream payload must not cost more than parsing did"). Parse =
// the gateway's parseJson (depth scan + JSON.parse); build = validate + the chat endpoint's payload
// (JSON.stringify of the whole body). Best of N runs each, ms. Decision and numbers: docs/behaviour.md.
//   node bench/json-payload.ts [--runs 7]
import { parseJson } from '../src/http/body.ts';
import { CHAT_COMPLETIONS } from '../src/routes/chat-completions.ts';
import { compileConfig } from '../src/config/schema.ts';

const runs = Number(process.argv[process.argv.indexOf('--runs') + 1]) || 7;
const MiB = 1024 * 1024;
const config = compileConfig({ models: [{ name: 'm', price: { input: 1, output: 1 }, upstreams: [{ url: 'http://x/v1' }] }] }, {});
const model = config.models[0]!;

/** A chat body padded to ~4 MiB by `fill(bytes)`, a JSON value text. */
function body(fill: (n: number) => string, stream = false): string {
  const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream };
  const head = JSON.stringify(base).slice(0, -1) + ',"x":';
  return head + fill(4 * MiB - head.length - 1) + '}';
}

const nest64 = '['.repeat(62) + '1' + ']'.repeat(62);
const shapes: Record<string, string> = {
  'one 4 MiB prompt string': JSON.stringify({
    model: 'm',
    messages: [{ role: 'user', content: 'lorem ipsum dolor sit amet '.repeat(Math.floor((4 * MiB - 100) / 27)) }],
  }),
  '40k short messages': JSON.stringify({
    model: 'm',
    messages: Array.from({ length: 40_000 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: `message number ${i} ${'y'.repeat(60)}`,
    })),
  }),
  'passthrough array of small ints': body((n) => '[' + '1,'.repeat(Math.floor(n / 2) - 1) + '1]'),
  'passthrough escapes (\\u0001)': body((n) => '"' + '\\u0001'.repeat(Math.floor((n - 2) / 6)) + '"'),
  'passthrough 64-deep arrays, repeated': body((n) => '[' + `${nest64},`.repeat(Math.floor(n / (nest64.length + 1)) - 1) + nest64 + ']'),
  'passthrough objects of short keys': body((n) => '{' + Array.from({ length: Math.floor(n / 12) }, (_, i) => `"k${i}":1`).join(',') + '}'),
};

function best(f: () => unknown): number {
  let min = Infinity;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    f();
    min = Math.min(min, performance.now() - t0);
  }
  return min;
}

console.log(`| body (~4 MiB) | parse ms | payload build ms | build / parse |\n| --- | ---: | ---: | ---: |`);
for (const [name, text] of Object.entries(shapes)) {
  const parse = best(() => parseJson(text));
  const value = parseJson(text);
  const build = best(() => {
    const b = CHAT_COMPLETIONS.validate(value, config.limits);
    const out = CHAT_COMPLETIONS.output(b, model);
    return CHAT_COMPLETIONS.payload(b, model, out.perChoice);
  });
  console.log(
    `| ${name} (${(text.length / MiB).toFixed(2)} MiB) | ${parse.toFixed(1)} | ${build.toFixed(1)} | ${(build / parse).toFixed(2)} |`,
  );
}
