// The console's Redis sessions (src/store/redis-console.ts), on a real redis-server: "sign all members
// out" racing a sign-in. The end reads the account's index, deletes those sessions, then removes them
// from the index; a session that signs in between the read and the removal must stay listed, so the next
// end reaches it (removing the whole index orphaned it for its 12 h lifetime).
import t from 'tap';
import { Redis } from 'ioredis';
import { startRedis } from '../helpers/redis.ts';
import { redisConsoleStore } from '../../src/store/redis-console.ts';
import * as K from '../../src/store/redis-keys.ts';

const fx = await startRedis(t);
if (fx)
  t.test('a sign-in landing while an account is signed out is ended by the next sign-out', async (t) => {
    const client = new Redis(fx.url);
    t.teardown(() => void client.quit());
    const store = redisConsoleStore(client);
    const session = { account: 'acme', created_at: new Date().toISOString(), expires_at: new Date(Date.now() + 43_200e3).toISOString() };
    await store.putSession('h1', session, 43_200);
    // The sign-in runs right after the end read the index, before it touches the index again.
    let injected = false;
    const racing = new Proxy(client, {
      get(target, prop, recv) {
        const v = Reflect.get(target, prop, recv);
        if (typeof v !== 'function') return v;
        if (prop !== 'smembers') return v.bind(target);
        return async (...args: [string]) => {
          const members = await target.smembers(...args);
          if (!injected) {
            injected = true;
            await store.putSession('h2', session, 43_200);
          }
          return members;
        };
      },
    });
    t.equal(injected, false);
    t.equal(await redisConsoleStore(racing as Redis).deleteAccountSessions('acme'), 1, 'the first end ends the session it read');
    t.equal(injected, true, 'the sign-in raced the end');
    t.equal(await store.getSession('h1'), null, 'h1 ended');
    t.ok(await store.getSession('h2'), 'h2 signed in after the read: alive for now');
    t.same(await client.smembers(K.consoleSessions('acme')), ['h2'], 'and still listed');
    t.equal(await store.deleteAccountSessions('acme'), 1, 'the next end reaches it');
    t.equal(await store.getSession('h2'), null, 'h2 ended');
    t.same(await client.smembers(K.consoleSessions('acme')), [], 'nothing listed');
  });
