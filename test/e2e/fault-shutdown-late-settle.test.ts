// SPEC §14 "Settles survive the process", for a request whose billing outlives the drain: SIGTERM during a
// Redis outage while a stateful /v1/responses follow-up streams; the stream is cut at the drain deadline,
// and the gateway then asks the upstream for the response's usage (SPEC §4), which here answers 1.9 s
// late — after the settles owed were spooled (deadline + 1.5 s). That settle, handed over afterwards, must
// still reach the spool (it used to be lost: the spool was closed at once and the process exited), and the
// process still exits within drain + 5 s. Its usage, recorded as it settles, must reach the usage spool
// too (SPEC §10: usage used to stop right after the drain, so this record was never flushed).
// And when the upstream's answer to that lookup comes later than anything could still be spooled (here 6 s,
// past drain + 2.5 s), the lookup is given up for SPEC §4's estimate at deadline + 1.95 s, and that settle is
// spooled (it used to be left to the reaper with an error line: an unbilled completion).
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startRedis } from '../helpers/redis.ts';
import { startGateway } from '../helpers/gateway.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSim } from './chat-fixture.ts';
import { ledgerOf, spawnGateway } from './credit-support.ts';
import { spooled, usageSpooled } from './fault-support.ts';
import type { Simulator } from '../../src/simulator/simulator.ts';

const BOOT_MS = 30_000;
// Late enough to land after the settles owed were spooled (+ 1.5 s), with room before the lookups are cut
// (+ 2.5 s − command_timeout_ms − 0.25 s = + 1.95 s here) on a loaded machine.
const RETRIEVE_DELAY_MS = 1_550;

/** An HTTP front to the simulator that answers `GET /v1/responses/{id}` `delayMs` late (counting them); everything else as is. */
async function slowRetrieveFront(
  t: Parameters<typeof startSim>[0],
  sim: Simulator,
  delayMs: number,
): Promise<{ url: string; lookups: () => number }> {
  let lookups = 0;
  const server = createServer((req, res) => {
    const forward = () => {
      const out = httpRequest({ host: '127.0.0.1', port: sim.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      });
      out.on('error', () => res.destroy());
      req.pipe(out);
    };
    if (req.method === 'GET' && req.url?.startsWith('/v1/responses/')) {
      lookups++;
      setTimeout(forward, delayMs).unref();
    } else forward();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, lookups: () => lookups };
}

// Later than the spool stays open (deadline + 2.5 s), and than the process may live (drain + 5 s).
const RETRIEVE_TOO_LATE_MS = 6_000;

const redis = await startRedis(t, { restartable: true });
if (redis) {
  const cases = [
    {
      name: 'Redis away at SIGTERM: a settle handed over after the spool was written still reaches it',
      delayMs: RETRIEVE_DELAY_MS,
      source: 'upstream',
    },
    {
      name: 'Redis away at SIGTERM: a usage lookup answering after the spool closes is given up for the estimate, which is spooled',
      delayMs: RETRIEVE_TOO_LATE_MS,
      source: 'estimated',
    },
  ];
  for (const c of cases)
    t.test(c.name, async (t) => {
      const sim = await startSim(t);
      const front = await slowRetrieveFront(t, sim, c.delayMs);
      const admin = await startGateway(t, { redisUrl: redis.url, upstreamUrl: sim.url, config: { store: { command_timeout_ms: 300 } } });
      const { key } = await admin.createKey({ account: 'late', env: 'live' });
      await admin.grant('late', 1_000_000_000);
      const spoolDir = await mkdtemp(join(tmpdir(), 'tollgate-fault-late-'));
      t.teardown(() => rm(spoolDir, { recursive: true, force: true }));
      const drainSeconds = 2;
      const gw = await spawnGateway(t, {
        readyTimeoutMs: BOOT_MS,
        redisUrl: redis.url,
        upstreamUrl: front.url,
        config: { server: { drain_seconds: drainSeconds, spool_dir: spoolDir }, store: { command_timeout_ms: 300 } },
      });
      const post = (body: Record<string, unknown>) =>
        fetch(`${gw.url}/v1/responses`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-small', ...body }),
        });
      // The stored response a follow-up continues (settled while Redis is up).
      const baseRes = await post({ input: 'the history', sim: { tokens: 8 } });
      t.equal(baseRes.status, 200);
      const { id: prev } = (await baseRes.json()) as { id: string };
      const baseId = baseRes.headers.get('x-request-id')!;
      const baseEntry = await waitFor(
        async () => (await ledgerOf(admin.admin, 'late')).find((e) => e.request_id === baseId),
        5_000,
        'the base debit',
      );

      // A follow-up streaming 400 tokens × 40 ms (16 s): still open at the drain deadline.
      const res = await post({ input: 'go on', previous_response_id: prev, stream: true, sim: { tokens: 400, delay_ms: 40 } });
      t.equal(res.status, 200);
      const id = res.headers.get('x-request-id')!;
      const reader = res.body!.getReader();
      let text = '';
      while ((text.match(/response\.output_text\.delta/g) ?? []).length < 3) {
        const { value, done } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString('utf8');
      }
      await redis.stop();
      const termAt = Date.now();
      gw.child.kill('SIGTERM');
      for (;;) {
        const r = await reader.read().catch(() => ({ done: true, value: undefined }));
        if (r.done) break;
      }
      const { code } = await gw.exited;
      const took = Date.now() - termAt;
      const out = gw.output();
      t.comment(out.split('\n').find((l) => l.includes('"drained_ms"')) ?? 'no shutdown phases line');
      t.equal(code, 0, 'exit code 0');
      t.ok(took <= (drainSeconds + 5) * 1000, `exited ${took} ms after SIGTERM: within drain + 5 s`);
      t.equal(front.lookups(), 1, "the stream was cut and the gateway asked the upstream for the response's usage");

      const { files, settles } = await spooled(spoolDir);
      t.same(
        settles.map((s) => s.requestId),
        [id],
        'the late settle is spooled',
      );
      t.equal(files.filter((f) => f.endsWith('.spool')).length, 1, 'in one spool file, closed');
      t.match(
        settles[0],
        { account: 'late', usageSource: c.source },
        c.source === 'upstream' ? 'billed from the usage the upstream reported' : 'billed the estimate (the context window as input)',
      );
      const line = out.split('\n').find((l) => l.includes('settle spooled') && l.includes(id));
      t.ok(line, 'with its error line');
      t.notMatch(out, /settle could not be spooled|settle still being billed at exit/, 'nothing lost');
      const usage = await usageSpooled(spoolDir);
      // Its usage, and maybe the base request's (recorded a moment before Redis went away, not flushed yet:
      // flushes are at most a second apart, and none goes while the store's loss is unknown), in one cell
      // or two: the spooled totals are the late request's, or its plus the base's, exactly.
      const sum = (cs: { requests: number; prompt_tokens: number; completion_tokens: number; cost_micros: number }[]) =>
        cs.reduce(
          (a, c) => [a[0]! + c.requests, a[1]! + c.prompt_tokens, a[2]! + c.completion_tokens, a[3]! + c.cost_micros],
          [0, 0, 0, 0],
        );
      const spooledTotal = sum(usage.cells.filter((c) => c.account === 'late'));
      const late = [1, settles[0]!.promptTokens, settles[0]!.completionTokens, settles[0]!.costMicros];
      const withBase = [
        late[0]! + 1,
        late[1]! + baseEntry.prompt_tokens!,
        late[2]! + baseEntry.completion_tokens!,
        late[3]! - baseEntry.amount_micros,
      ];
      t.ok(
        [late, withBase].some((want) => want.every((v, i) => v === spooledTotal[i])),
        `its usage is in the usage spool, as billed (${JSON.stringify(usage.cells)})`,
      );
      t.notMatch(out, /usage recorded after stop|usage aggregates lost at stop/, 'no usage lost');
      await redis.start();
    });
}
