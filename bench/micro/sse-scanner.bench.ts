/**
 * Cost of metering a streamed completion: the SSE meter over a realistic 64-token vLLM/OpenAI stream
 * (with `"usage":null` on every chunk, the worst case for the usage check, and a final usage-only chunk
 * that is dropped), per chunk and per stream, for three chunkings, one chunk per event-loop turn (a
 * token-paced stream), and the same stream arriving in one turn (a burst: the relay hands the meter
 * all of a turn's chunks, then flushes once), as 68 chunks and as the one chunk undici hands over when
 * the upstream wrote it at once. The baseline "parse every event" is what the meter avoids. The same 64
 * tokens as a Responses API stream (typed events, usage in response.completed, the text repeated by the
 * .done events) go through the same scanner with the Responses row of meter/formats.ts.
 * Run: `node bench/micro/sse-scanner.bench.ts`.
 */
import { createSseMeter } from '../../src/meter/sse-scanner.ts';
import { RESPONSES } from '../../src/meter/formats.ts';
import { buildResponsesStream, buildStream } from '../../test/meter/sse-fixture.ts';
import { createReport, nsPerOp } from './timing.ts';

const words = 'The quick brown fox jumps over the lazy dog while "quoted" text, café and 😀 appear\n'.split(/(?= )/);
const pieces = Array.from({ length: 64 }, (_, i) => words[i % words.length]!);
const { sse } = buildStream({ pieces, usageNullOnChunks: true, usage: { prompt_tokens: 812, completion_tokens: 64 } });
const stream = Buffer.from(sse);
const events = sse.split(/(?<=\n\n)/).map((e) => Buffer.from(e));

/** Chunkings: one event per read (vLLM flushes each), every event cut in two, and 4 KiB TCP reads. */
const oneEach = events;
const halves = events.flatMap((e) => [e.subarray(0, e.length >> 1), e.subarray(e.length >> 1)]);
const reads4k: Buffer[] = [];
for (let i = 0; i < stream.length; i += 4096) reads4k.push(stream.subarray(i, i + 4096));

const report = createReport();
console.log(`stream: ${stream.length} bytes, ${events.length} events, 64 content tokens`);

function meterStream(chunks: Buffer[]): number {
  const m = createSseMeter({ dropUsageOnlyChunk: true });
  let n = 0;
  for (const c of chunks) {
    const out = m.push(c);
    if (Buffer.isBuffer(out)) n += out.length;
    else if (out !== null) for (const b of out) n += b.length;
  }
  n += m.end()?.length ?? 0;
  if (m.usage === null || !m.sawDone) throw new Error('bench stream not metered');
  return n;
}

/** All chunks in one event-loop turn, as the relay feeds a burst: add each, flush once. */
function meterBurst(chunks: Buffer[]): number {
  const m = createSseMeter({ dropUsageOnlyChunk: true });
  for (const c of chunks) m.add(c);
  const out = m.flush();
  let n = Buffer.isBuffer(out) ? out.length : 0;
  if (Array.isArray(out)) for (const b of out) n += b.length;
  n += m.end()?.length ?? 0;
  if (m.usage === null || !m.sawDone) throw new Error('bench stream not metered');
  return n;
}

const perBurst = nsPerOp(() => meterBurst(oneEach), 2_000, 500);
report.add('meter, one event per chunk, all in one turn: per stream', perBurst, 'ns/op', `${oneEach.length} chunks, one flush`);
// The whole stream in one chunk: what undici hands the relay when the upstream wrote the burst at once.
const perOneChunk = nsPerOp(() => meterBurst([stream]), 2_000, 500);
report.add('meter, the whole stream as one chunk (a burst): per stream', perOneChunk, 'ns/op', `${stream.length} bytes, one flush`);

for (const [name, chunks] of [
  ['one event per chunk', oneEach],
  ['each event split in two', halves],
  ['4 KiB reads', reads4k],
] as const) {
  const perStream = nsPerOp(() => meterStream(chunks), 2_000, 500);
  report.add(`meter, ${name}: per stream`, perStream, 'ns/op', `${chunks.length} chunks`);
  report.add(`meter, ${name}: per chunk`, perStream / chunks.length, 'ns/op');
}

// The Responses API's stream of the same 64 tokens, one event per chunk: the same scanner, its own key table.
const responses = buildResponsesStream({ pieces, usage: { input_tokens: 812, output_tokens: 64 } });
const responsesEvents = responses.sse.split(/(?<=\n\n)/).map((e) => Buffer.from(e));
const responsesPerStream = nsPerOp(
  () => {
    const m = createSseMeter({ dropUsageOnlyChunk: false, format: RESPONSES });
    let n = 0;
    for (const c of responsesEvents) {
      const out = m.push(c);
      if (Buffer.isBuffer(out)) n += out.length;
    }
    if (m.usage === null) throw new Error('bench responses stream not metered');
    return n;
  },
  2_000,
  500,
);
report.add(
  'responses meter, one event per chunk: per stream',
  responsesPerStream,
  'ns/op',
  `${responsesEvents.length} chunks, ${Buffer.byteLength(responses.sse)} bytes`,
);
report.add('responses meter, one event per chunk: per chunk', responsesPerStream / responsesEvents.length, 'ns/op');

// With the tokenizer fallback's text decode at the end (only when usage is missing).
const noUsage = buildStream({ pieces, usageNullOnChunks: true, usage: null });
const noUsageEvents = noUsage.sse.split(/(?<=\n\n)/).map((e) => Buffer.from(e));
report.add(
  'meter + completionText(), no usage: per stream',
  nsPerOp(
    () => {
      const m = createSseMeter({ dropUsageOnlyChunk: true });
      for (const c of noUsageEvents) m.push(c);
      return m.completionText().length;
    },
    2_000,
    500,
  ),
  'ns/op',
);

// Baseline: split lines and JSON.parse every event, as a naive meter would.
report.add(
  'baseline: JSON.parse every event: per stream',
  nsPerOp(
    () => {
      let usage: unknown = null;
      for (const e of events) {
        const s = e.toString('utf8');
        if (!s.startsWith('data: {')) continue;
        const o = JSON.parse(s.slice(6)) as { usage?: unknown };
        if (o.usage) usage = o.usage;
      }
      return usage;
    },
    2_000,
    500,
  ),
  'ns/op',
);
report.print();
