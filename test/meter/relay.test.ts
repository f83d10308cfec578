// The relay on a real loopback response, fed by an UpstreamCall whose controller records pause/resume:
// a dropped usage event leaves several buffers per chunk, written corked for the tick; a write past the
// high-water mark pauses the upstream, and the drain that follows resumes it — including the drain Node
// emits inside the tick's uncork, which a listener added after it would miss (the stream would stall).
import t from 'tap';
import { createServer, request, type IncomingMessage } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Dispatcher } from 'undici';
import { relaySse, type RelayOutcome } from '../../src/meter/relay.ts';
import { UpstreamCall } from '../../src/upstream/call.ts';
import type { Upstream } from '../../src/upstream/pool.ts';
import { relayOnLoopback } from './relay-fixture.ts';
import { event } from './sse-fixture.ts';

t.test('several buffers per chunk past the high-water mark: paused, resumed by the drain, nothing lost', async (t) => {
  const log: string[] = [];
  let resumed: () => void = () => {};
  const controller = {
    aborted: false,
    paused: false,
    reason: null,
    abort(reason: Error) {
      log.push(`abort ${reason.message}`);
    },
    pause() {
      log.push('pause');
    },
    resume() {
      log.push('resume');
      resumed();
    },
  } as unknown as Dispatcher.DispatchController;
  const call = new UpstreamCall({ label: 'sim' } as Upstream);
  call.onRequestStart(controller);
  call.onResponseStart(controller, 200, { 'content-type': 'text/event-stream' });

  // Each chunk: two ~48 KB events; between those of the last, the usage-only event the gateway added (dropped).
  const big = (c: string) => event({ choices: [{ delta: { content: c.repeat(48 * 1024) } }] });
  const usage = event({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } });
  const chunks = ['a', 'b', 'c'].map((c) => big(c) + (c === 'c' ? usage : '') + big(c.toUpperCase()));
  const expected = chunks.map((c) => c.replace(usage, '')).join('') + 'data: [DONE]\n\n';

  let outcome: Promise<RelayOutcome> | undefined;
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders(); // as the route does when no body arrived with the upstream's headers
    outcome = relaySse(call, res, true, () => false);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => server.close());
  const req = request({ port: (server.address() as AddressInfo).port, host: '127.0.0.1' });
  req.end();
  const [res] = (await once(req, 'response')) as [IncomingMessage];
  let body = '';
  res.setEncoding('latin1').on('data', (s: string) => (body += s));

  for (const c of chunks) {
    const next = new Promise<void>((r) => (resumed = r));
    call.onResponseData(controller, Buffer.from(c, 'latin1'));
    if (log.at(-1) === 'pause') {
      const timeout = new Promise((_, reject) =>
        setTimeout(() => reject(new Error('paused and never resumed: the drain was missed')), 3000).unref(),
      );
      await Promise.race([next, timeout]);
    }
  }
  t.ok(log.includes('pause'), 'a write past the high-water mark paused the upstream');
  t.equal(log.filter((l) => l === 'resume').length, log.filter((l) => l === 'pause').length, 'every pause was resumed');
  call.onResponseData(controller, Buffer.from('data: [DONE]\n\n'));
  call.onResponseEnd();
  await once(res, 'end');
  t.equal(body.length, expected.length, 'every byte arrived');
  t.ok(body === expected, 'in order, without the usage event');
  const o = await outcome!;
  t.equal(o.end, 'complete');
  t.same(o.usage, { prompt_tokens: 1, completion_tokens: 2 }, 'the dropped event was still metered');
});

t.test('the default keep cap is 8 MiB of raw text: what streams past it is reported for billing (unseenTextBytes)', async (t) => {
  const { call, controller, url, outcome, close } = await relayOnLoopback((call, res) => relaySse(call, res, true, () => false));
  t.teardown(close);
  const res = await fetch(url);
  const reading = res.arrayBuffer();
  // 18 events of 512 KiB of text: 16 fill the 8 MiB exactly, 2 pass it.
  const piece = event({ choices: [{ delta: { content: 'x'.repeat(512 * 1024) } }] });
  for (let i = 0; i < 18; i++) call.onResponseData(controller, Buffer.from(piece));
  call.onResponseData(controller, Buffer.from('data: [DONE]\n\n'));
  call.onResponseEnd();
  t.equal((await reading).byteLength, 18 * piece.length + 14, 'every byte relayed');
  const o = await outcome;
  t.equal(o.unseenTextBytes, 2 * 512 * 1024);
  t.equal(o.text().length, 8 * 1024 * 1024, 'the kept text');
});
