import t from 'tap';
import { createFailedAuthLimiter } from '../../src/auth/failed-auth-limiter.ts';

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
