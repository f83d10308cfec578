// The shares page reads titles from the snapshot objects within a byte budget (docs/console.md "Shares"):
// newest live shares first, while their snapshots add up to at most 4 MiB, a few at a time; the others
// say "title not read". Before, the page read and parsed every listed snapshot at once: 100 shares of
// 1 MB held the event loop ~0.8 s per load. Real Redis, real S3 (signature-checking), admin API creates.
import t, { type Test } from 'tap';
import { startGateway } from '../helpers/gateway.ts';
import { startRedis } from '../helpers/redis.ts';
import { sharesS3Config, startS3 } from '../helpers/s3.ts';

const TITLE_BYTES = 4 * 1024 * 1024; // the documented budget, spelled here
const redis = await startRedis(t);
if (redis) {
  const s3 = await startS3(t);
  const gw = await startGateway(t, { redisUrl: redis.url, config: { shares: { s3: sharesS3Config(s3) } } });
  await gw.createKey({ account: 'big', env: 'test' });

  async function publish(title: string, bytes: number): Promise<void> {
    const content = 'x'.repeat(bytes - 200);
    const r = await gw.admin('/admin/shares', { body: { account: 'big', snapshot: { title, messages: [{ role: 'user', content }] } } });
    if (r.status !== 201) throw new Error(`publish: ${r.status} ${JSON.stringify(r.body)}`);
  }
  async function page(t: Test): Promise<string> {
    const { body: link } = await gw.admin('/admin/console/sessions', { body: { account: 'big' } });
    const cookie = (await fetch(link.url, { redirect: 'manual' })).headers.get('set-cookie')!.split(';')[0]!;
    const res = await fetch(`${gw.url}/console/accounts/big/shares`, { headers: { cookie } });
    t.equal(res.status, 200);
    return res.text();
  }

  t.test('titles are read newest first within the byte budget; the rest say so', async (t) => {
    // Six shares of 1,000,000 bytes, then two small ones (the newest): the small two and four large fit.
    for (let i = 0; i < 6; i++) await publish(`large ${i}`, 1_000_000);
    for (let i = 0; i < 2; i++) await publish(`small ${i}`, 2_000);
    t.ok(2 * 2_000 + 4 * 1_000_000 <= TITLE_BYTES && 5 * 1_000_000 > TITLE_BYTES, 'the arithmetic the test relies on');
    const text = await page(t);
    const titles = [...text.matchAll(/<td>([^<]+)<\/td>/g)].map((m) => m[1]!).filter((s) => /^(large|small) \d$/.test(s));
    t.same(titles, ['small 1', 'small 0', 'large 5', 'large 4', 'large 3', 'large 2'], 'the newest, in order');
    t.equal([...text.matchAll(/title not read/g)].length, 2, 'the two oldest large shares');
    t.match(text, /id="titles-unread"[\s\S]*up to 4 MiB of them per page:\s*2 shares show no title/);
  });
}
