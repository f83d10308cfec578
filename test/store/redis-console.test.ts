// The console's Redis sessions (src/store/redis-console.ts), on a real redis-server: "sign all members
// out" racing a sign-in, and revoking the links minted before it (the account's link generation). The end reads the account's index, deletes those sessions, then removes them
// from the index; a session that signs in between the read and the removal must stay listed, so the next
// end reaches it (removing the whole index orphaned it for its 12 h lifetime).
import t from 'tap';
import { Redis } from 'ioredis';
import { startRedis } from '../helpers/redis.ts';
import { LINK_GENERATION_TTL_SECONDS, redisConsoleStore } from '../../src/store/redis-console.ts';
import * as K from '../../src/store/redis-keys.ts';
import { MAX_LINK_TTL_SECONDS } from '../../src/store/types.ts';
import { LINK_TTL } from '../../src/console/sessions.ts';

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

/** The store over a client that records each command it is asked for, and can run `onRead` once the end's read is answered. */
function recording(client: Redis, onRead?: () => Promise<void>) {
  const calls: string[] = [];
  const proxy = new Proxy(client, {
    get(target, prop, recv) {
      const v = Reflect.get(target, prop, recv);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls.push(String(prop));
        const r = v.apply(target, args);
        if (prop !== 'smembers' || !onRead) return r;
        const run = onRead;
        onRead = undefined;
        return (r as Promise<string[]>).then(async (members) => (await run(), members));
      };
    },
  });
  return { store: redisConsoleStore(proxy as Redis), calls };
}

if (fx) {
  t.test('ending sessions revokes the links minted before: the generation key, its lifetime, and what each step costs', async (t) => {
    const client = new Redis(fx.url);
    t.teardown(() => void client.quit());
    const { store, calls } = recording(client);
    const gen = K.consoleLinkGeneration('initech');
    t.ok(LINK_GENERATION_TTL_SECONDS > MAX_LINK_TTL_SECONDS, 'the generation outlives the longest link');
    t.equal(LINK_TTL.memberMax, MAX_LINK_TTL_SECONDS, "and the console's longest link is that one");

    await store.putLoginToken('never-ended', { account: 'initech' }, 600);
    t.same(calls.splice(0), ['getex', 'set'], 'a member mint: one more command, reading the generation');
    t.equal(await client.exists(gen), 0, 'an account never ended has no generation key');
    t.same(JSON.parse((await client.get(K.consoleLogin('never-ended')))!), { account: 'initech' }, 'and its tokens are stored as before');
    await store.putLoginToken('operator', { account: null }, 600);
    t.same(calls.splice(0), ['set'], 'an operator mint: as before');

    t.equal(await store.deleteAccountSessions('initech'), 0);
    t.same(calls.splice(0, 3), ['incr', 'expire', 'smembers'], 'an end bumps the generation in the round trip of its read');
    const ttl = await client.ttl(gen);
    t.ok(
      ttl > MAX_LINK_TTL_SECONDS && ttl <= LINK_GENERATION_TTL_SECONDS,
      `the generation key outlives every link minted before (${ttl} s)`,
    );
    // A token stored by the version before generations existed (no `gen`): minted before this end.
    await client.set(K.consoleLogin('old-format'), JSON.stringify({ account: 'initech' }), 'EX', 600);

    calls.length = 0;
    t.equal(await store.takeLoginToken('never-ended'), null, 'a link minted before the end is refused');
    t.same(calls.splice(0), ['getdel', 'get'], 'a member sign-in: one more command, reading the generation');
    t.equal(await store.takeLoginToken('old-format'), null, 'so is one stored by the previous version');
    calls.length = 0;
    t.same(await store.takeLoginToken('operator'), { account: null });
    t.same(calls.splice(0), ['getdel'], 'an operator sign-in reads no generation');

    await client.expire(gen, 100);
    await store.putLoginToken('after', { account: 'initech' }, MAX_LINK_TTL_SECONDS);
    t.same(JSON.parse((await client.get(K.consoleLogin('after')))!), { account: 'initech', gen: 1 });
    t.ok((await client.ttl(gen)) > MAX_LINK_TTL_SECONDS, 'a mint renews the generation, so it outlives the link just minted');
    t.same(await store.takeLoginToken('after'), { account: 'initech' }, 'a link minted after the end works');
  });

  t.test('a link opened while its account is signed out is refused once the end has read the sessions', async (t) => {
    const client = new Redis(fx.url);
    t.teardown(() => void client.quit());
    const plain = redisConsoleStore(client);
    await plain.putLoginToken('racing', { account: 'umbrella' }, 600);
    let taken: unknown = 'not run';
    const { store } = recording(client, async () => {
      taken = await plain.takeLoginToken('racing');
    });
    await store.deleteAccountSessions('umbrella');
    t.equal(taken, null, 'the link was opened after the read and found its generation passed');
  });
}
