import t from 'tap';
import v8 from 'node:v8';
import vm from 'node:vm';
import { createFailedAuthLimiter } from '../../src/auth/failed-auth-limiter.ts';
import { MAX_ADDRESSES, addressKey } from '../../src/auth/failure-window.ts';

t.test('the limit-th failure is still admitted; the next one is refused with a wait', async (t) => {
  const l = createFailedAuthLimiter(30);
  t.equal(await l.blockedFor('10.0.0.1'), 0, 'an address never seen is not blocked');
  for (let i = 1; i <= 30; i++) t.equal(await l.fail('10.0.0.1'), 0, `failure ${i}`);
  const wait = await l.blockedFor('10.0.0.1');
  t.ok(wait > 0 && wait <= 60_000, `blocked for ${wait} ms, within the one-minute window`);
  const over = await l.fail('10.0.0.1');
  t.ok(over > 0 && over <= 60_000, 'failures past the limit report the wait');
});

t.test('addresses are counted separately', async (t) => {
  const l = createFailedAuthLimiter(2);
  await l.fail('a');
  await l.fail('a');
  t.ok((await l.blockedFor('a')) > 0);
  t.equal(await l.blockedFor('b'), 0);
  t.equal(await l.fail('b'), 0);
});

/** Heap in use after a full collection (gc exposed at run time: tap gives no --expose-gc). */
function heapAfterGc(): number {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
  return process.memoryUsage().heapUsed;
}
const ipv4 = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

t.test('a spray of distinct addresses keeps memory bounded (at most MAX_ADDRESSES remembered); a prober stays limited', async (t) => {
  const l = createFailedAuthLimiter(30);
  const prober = '192.0.2.7';
  for (let i = 0; i < 31; i++) await l.fail(prober);
  t.ok((await l.blockedFor(prober)) > 0, 'the prober is limited');
  const h0 = heapAfterGc();
  const n = 3 * MAX_ADDRESSES;
  let stillLimited = true;
  for (let i = 0; i < n; i++) {
    await l.fail(ipv4(i));
    // The prober keeps probing meanwhile: its entry stays recent, so the spray cannot evict it.
    if (i % 10_000 === 0) stillLimited &&= (await l.blockedFor(prober)) > 0;
  }
  const grown = heapAfterGc() - h0;
  // rate-limiter-flexible's memory limiter (used before) kept every address: +119 MiB for these 300,000.
  t.ok(grown < 48 * 1024 * 1024, `${n} distinct addresses: heap +${(grown / 1048576).toFixed(1)} MiB`);
  t.ok(stillLimited, 'the prober was limited throughout the spray');
  t.ok((await l.blockedFor(prober)) > 0, 'and after it');
  t.ok((await l.fail(prober)) > 0, 'its next failure is refused with a wait');
});

t.test('the least recently failing address is forgotten first once maxAddresses are remembered', async (t) => {
  const l = createFailedAuthLimiter(2, { maxAddresses: 100 });
  for (let i = 0; i < 3; i++) await l.fail('a');
  t.ok((await l.blockedFor('a')) > 0);
  for (let i = 0; i < 100; i++) await l.fail(ipv4(i));
  t.equal(await l.blockedFor('a'), 0, 'evicted by 100 newer addresses');
  t.ok(
    (await l.blockedFor(ipv4(99))) === 0 && (await l.fail(ipv4(99))) === 0 && (await l.fail(ipv4(99))) > 0,
    'the newest are still counted',
  );
});

t.test('IPv6 addresses count by their /64: rotating inside a /64 does not escape the limit', async (t) => {
  const l = createFailedAuthLimiter(30);
  for (let i = 1; i <= 30; i++) t.equal(await l.fail(`2001:db8:1:2::${i.toString(16)}`), 0);
  t.ok((await l.fail('2001:db8:1:2:ffff:ffff:ffff:ffff')) > 0, 'the 31st failure of the /64, from a fresh address, is refused');
  t.ok((await l.blockedFor('2001:0db8:0001:0002:0:0:0:abcd')) > 0, 'any spelling of an address in it is blocked');
  t.equal(await l.blockedFor('2001:db8:1:3::1'), 0, 'the next /64 is not');
  t.equal(await l.blockedFor('10.0.0.1'), 0, 'nor an IPv4 address');
});

t.test('addressKey: IPv4 as is, IPv6 as its /64 in one spelling', async (t) => {
  const cases: [string, string][] = [
    ['10.0.0.1', '10.0.0.1'],
    ['unknown', 'unknown'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002::1', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['::', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['2001:db8:1:2::', '2001:db8:1:2::/64'],
    ['2001:db8:1::1.2.3.4', '2001:db8:1:0::/64'],
    ['64:ff9b::192.0.2.33', '64:ff9b:0:0::/64'],
    ['1:2:3:4:5:6:1.2.3.4', '1:2:3:4::/64'],
  ];
  for (const [address, key] of cases) t.equal(addressKey(address), key, address);
});
