// Issue 24, attack #5 (SPEC §13 "Share reads never refuse a valid slug"): 121 reads of unknown slugs from
// one address (557 ms) locked that address out of every share for ~60 s. Platforms render share pages
// server-side from one address, so one prober took every share page down for every visitor. Here the
// prober (127.0.0.1) sends 121 failed reads with the default shares.failed_reads_per_minute (120)
// while a victim renderer on another address (127.0.0.2) reads a live share; then the prober's own
// address reads the live share. Asserted: the prober's failed reads end in 429, the live share is 200
// from both addresses, and /healthz stays fast. On the code before the fix the last read was 429.
import t from 'tap';
import { request } from 'node:http';
import { startRedis } from '../helpers/redis.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';
import { startGateway } from '../helpers/gateway.ts';

const PROBES = 121;

/** GET from a chosen loopback source address: status and wall time. */
function readFrom(url: string, localAddress: string): Promise<{ status: number; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    request(url, { localAddress, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode!, ms: performance.now() - t0 }));
    })
      .on('error', reject)
      .end();
  });
}

const redis = await startRedis(t);
if (redis) {
  await redis.client.flushdb();
  const s3 = await startS3(t);
  // The default failed-read limit (the test helper raises it for the other share tests).
  const gw = await startGateway(t, { redisUrl: redis.url, config: { shares: { s3: sharesS3Config(s3), failed_reads_per_minute: 120 } } });
  const { key } = await gw.createKey({ account: 'publisher', env: 'live' });
  const published = await fetch(`${gw.url}/v1/shares`, {
    method: 'POST',
    headers: { ...gw.auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ snapshot: { title: 'page', messages: [{ role: 'user', content: 'hello' }] } }),
  });
  const slug = ((await published.json()) as { slug: string }).slug;
  const live = `${gw.url}/v1/shares/${slug}`;

  t.test(`${PROBES} failed reads from one address: that address and every other still read a live share`, async (t) => {
    let probing = true;
    const victim: number[] = [];
    let worstHealthMs = 0;
    const measure = (async () => {
      // Bounded: at most 300 rounds, and at least 3 after the attack started.
      for (let i = 0; i < 300 && (probing || victim.length < 3); i++) {
        victim.push((await readFrom(live, '127.0.0.2')).status);
        worstHealthMs = Math.max(worstHealthMs, (await readFrom(`${gw.adminUrl}/healthz`, '127.0.0.1')).ms);
      }
    })();
    const probes: number[] = [];
    for (let i = 0; i < PROBES; i++) {
      // Unknown well-formed slugs and malformed ones, as a prober sends them.
      const path = i % 3 === 0 ? 'not-a-slug' : `${'Z'.repeat(21)}${'123456789ABCDEFGHJKLMNPQRSTUVWXYZabc'[i % 36]}`;
      probes.push((await readFrom(`${gw.url}/v1/shares/${path}`, '127.0.0.1')).status);
    }
    probing = false;
    await measure;

    t.ok(
      probes.slice(0, 120).every((s) => s === 404 || s === 422),
      'the first 120 probes are plain 404/422',
    );
    t.equal(probes.at(-1), 429, 'the 121st is throttled');
    t.equal((await readFrom(`${gw.url}/v1/shares/${'Z'.repeat(22)}`, '127.0.0.1')).status, 429, 'and further failed reads stay 429');

    const own = await readFrom(live, '127.0.0.1');
    t.equal(own.status, 200, "the prober's own address still reads the live share (a renderer's address)");
    t.ok(victim.length >= 3, `the victim was measured (${victim.length} reads)`);
    t.strictSame([...new Set(victim)], [200], 'every read of the live share from another address succeeded');
    t.ok(worstHealthMs < 1_000, `/healthz worst ${worstHealthMs.toFixed(0)} ms during the probing`);
  });
}
