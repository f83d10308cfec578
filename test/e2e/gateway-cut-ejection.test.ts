// A stream the gateway cuts itself, after the upstream answered (its total timeout, an event past its
// event bound), is a broken stream for the client and billed as one, but it is no failure of the
// upstream: it must not count toward ejecting it. Otherwise one tenant's long streams (or answers with
// an event past the bound) eject a healthy upstream for every tenant (SPEC §14 upstream health).
import t from 'tap';
import { createServer } from 'node:http';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { hostOf, metricsText, postChat, sample, serveUpstream, simSmallModel, sseData, startSim, waitForDebit } from './chat-fixture.ts';

const USER = [{ role: 'user', content: 'tell me something' }];
const ERROR_EVENT = { error: { type: 'upstream_error', code: 'upstream_error' } };

/** Request log lines whose stream the gateway cut for `reason`. */
const cutLogs = (gw: Awaited<ReturnType<typeof startGateway>>, reason: string) =>
  gw.logs.filter((l) => l.includes(`"relay_cut":"${reason}"`)).length;

/** Sends `n` requests to a model served by [a, b]: how many reached `a` (least loaded first, rotating). */
async function servedBy(gw: Awaited<ReturnType<typeof startGateway>>, key: string, modelName: string, count: () => number, n: number) {
  const before = count();
  for (let i = 0; i < n; i++) {
    const res = await postChat(gw, key, { model: modelName, messages: USER });
    t.equal(res.status, 200);
    await res.arrayBuffer();
  }
  return count() - before;
}

t.test('the total timeout cutting streams the upstream was serving does not eject it', async (t) => {
  const a = await startSim(t);
  const b = await startSim(t);
  const gw = await startGateway(t, {
    upstreamUrl: a.url,
    config: {
      upstream: { total_timeout_ms: 600, eject_after_failures: 2, eject_seconds: 60 },
      models: [simSmallModel('solo', [a.url]), simSmallModel('pair', [a.url, b.url])],
    },
  });
  const { key } = await gw.createKey({ account: 'cut-a', env: 'live' });
  await gw.grant('cut-a', 1_000_000);
  // Three long streams at once (100 tokens, 50 ms apart): each is cut at 600 ms, a broken stream for its
  // client. At once: each stream's headers count as a success, so only failures after all of them add up.
  await Promise.all(
    [0, 1, 2].map(async (i) => {
      const res = await postChat(gw, key, { model: 'solo', messages: USER, stream: true, sim: { tokens: 100, delay_ms: 50 } });
      t.equal(res.status, 200);
      const data = sseData(await res.text());
      t.ok(data.length > 2 && data.length < 100, `stream ${i} cut mid-way (${data.length} events)`);
      t.match(JSON.parse(data.at(-1)!), ERROR_EVENT, 'it ends with the error event');
      t.match(await waitForDebit(gw, 'cut-a', res.headers.get('x-request-id')!), { usage_source: 'estimated' });
    }),
  );
  t.equal(sample(await metricsText(gw), 'tollgate_upstream_errors_total', { upstream: hostOf(a.url) }), 0, 'no upstream error recorded');
  await waitFor(() => cutLogs(gw, 'total_timeout') === 3, 2000, 'the three request lines');
  t.match(JSON.parse(gw.logs.find((l) => l.includes('"relay_cut"'))!), { relay_end: 'upstream_failed', relay_cut: 'total_timeout' });
  t.ok((await servedBy(gw, key, 'pair', () => a.requests.length, 6)) >= 2, 'the upstream still serves its share: not ejected');
});

t.test('an event past the event bound (chat) cuts the stream but does not eject the upstream', async (t) => {
  const b = await startSim(t);
  let seen = 0;
  // Streams one 2 MiB chunk to a request saying "huge", once three such are open (their headers first);
  // answers anything else with a small completion.
  const waiting: (() => void)[] = [];
  const h = await serveUpstream(
    t,
    createServer((req, res) => {
      seen++;
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        if (body.includes('huge')) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.flushHeaders();
          const chunk = {
            id: 'c',
            object: 'chat.completion.chunk',
            choices: [{ index: 0, delta: { content: 'x'.repeat(2 * 1024 * 1024) } }],
          };
          waiting.push(() => res.end(`data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`));
          if (waiting.length === 3) for (const send of waiting.splice(0)) setTimeout(send, 50);
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'c',
            object: 'chat.completion',
            choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
            usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
          }),
        );
      });
    }),
  );
  const gw = await startGateway(t, {
    upstreamUrl: h,
    config: {
      upstream: { eject_after_failures: 2, eject_seconds: 60 },
      models: [simSmallModel('solo', [h]), simSmallModel('pair', [h, b.url])],
    },
  });
  const { key } = await gw.createKey({ account: 'cut-b', env: 'live' });
  await gw.grant('cut-b', 1_000_000);
  await Promise.all(
    [0, 1, 2].map(async () => {
      const res = await postChat(gw, key, { model: 'solo', messages: [{ role: 'user', content: 'huge' }], stream: true });
      t.equal(res.status, 200);
      const data = sseData(await res.text());
      t.equal(data.length, 1, 'nothing of the oversized event');
      t.match(JSON.parse(data[0]!), ERROR_EVENT, 'the error event');
      await waitForDebit(gw, 'cut-b', res.headers.get('x-request-id')!);
    }),
  );
  t.equal(sample(await metricsText(gw), 'tollgate_upstream_errors_total', { upstream: hostOf(h) }), 0, 'no upstream error recorded');
  await waitFor(() => cutLogs(gw, 'event_too_large') === 3, 2000, 'the three request lines say relay_cut: event_too_large');
  t.ok((await servedBy(gw, key, 'pair', () => seen, 6)) >= 2, 'the upstream still serves its share: not ejected');
});
