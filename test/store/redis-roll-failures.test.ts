// A roll's successor on Redis when a write after its claim fails (docs/keys.md "Rotation"): the successor
// is never shown, so none of it may be left to authenticate, and its claim must not block the old key.
// The failures are real Redis errors: a relay in front of a real redis-server replaces the chosen command
// with one Redis refuses ("unknown command"), so that command never runs and its caller gets the error.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import t from 'tap';
import type { Test } from 'tap';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import type { Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { startRedisRelay } from '../helpers/redis-relay.ts';
import { keyRecord } from './contract-key-controls.ts';

const REFUSED = Buffer.from('*1\r\n$14\r\nTG-TEST-REFUSE\r\n');

/** Splits complete RESP commands (arrays of bulk strings) off the front of `buf`; the rest waits for more bytes. */
function commands(buf: Buffer): { done: Buffer[]; rest: Buffer } {
  const done: Buffer[] = [];
  let at = 0;
  outer: while (at < buf.length) {
    let i = buf.indexOf('\r\n', at);
    if (i < 0 || buf[at] !== 0x2a) break; // '*'
    let n = Number(buf.subarray(at + 1, i));
    let p = i + 2;
    while (n-- > 0) {
      i = buf.indexOf('\r\n', p);
      if (i < 0) break outer;
      const len = Number(buf.subarray(p + 1, i));
      p = i + 2 + len + 2;
      if (p > buf.length) break outer;
    }
    done.push(buf.subarray(at, p));
    at = p;
  }
  return { done, rest: buf.subarray(at) };
}

/** A relay to Redis that refuses (see REFUSED) each command for which `refuse` is true, once armed. */
async function startRefusingRelay(t: Test, port: number, refuse: (cmd: string) => boolean) {
  const state = { armed: false, refused: 0 };
  const relay = await startRedisRelay(t, port, () => {
    let pending = Buffer.alloc(0);
    return {
      toRedis(chunk, redis) {
        const { done, rest } = commands(Buffer.concat([pending, chunk]));
        pending = Buffer.from(rest);
        for (const c of done) {
          const hit = state.armed && refuse(c.toString('latin1'));
          if (hit) state.refused++;
          redis.write(hit ? REFUSED : c);
        }
      },
    };
  });
  return { url: relay.url, state };
}

const redis = await startRedis(t);
if (redis) {
  const port = Number(new URL(redis.url).port);
  const confirmLua = await readFile(new URL('../../src/store/lua/confirm-roll.lua', import.meta.url), 'utf8');
  const confirmSha = createHash('sha1').update(confirmLua).digest('hex');

  async function open(t: Test, refuse: (cmd: string) => boolean) {
    const relay = await startRefusingRelay(t, port, refuse);
    const store: Store = await createRedisStore({ url: relay.url, commandTimeoutMs: 300, settledTtlSeconds: 4260 });
    t.teardown(() => store.close());
    return { store, relay };
  }

  /** What a failed roll of `old` must not leave: the successor's record, index, key-set entry or claim. */
  async function nothingLeft(t: Test, store: Store, account: string, oldId: string, hash: string, id: string) {
    t.equal(await redis!.client.exists(K.keyRecord(hash)), 0, 'no successor record: it authenticates nowhere');
    t.equal(await store.getKeyByHash(hash), null);
    t.equal(await redis!.client.exists(K.keyIdIndex(id)), 0, 'no id index');
    t.equal(await redis!.client.sismember(K.accountKeys(account), id), 0, 'not in the key set');
    t.equal(await redis!.client.hexists(K.keysRolled(account), oldId), 0, 'no claim on the old key');
    const again = keyRecord('key_AGAiN0000000000', account, { rolled_from: oldId });
    t.equal(await store.createKey('hash-again', again), 'created', 'the old key rolls again at once');
  }

  t.test('the id index write fails: the successor record already written is deleted', async (t) => {
    await redis.client.flushdb();
    const { store, relay } = await open(t, (c) => c.includes('tg:keyid:key_SUCC') && /SET\r\n/i.test(c.slice(0, 20)));
    const old = keyRecord('key_OLD00000000000A', 'fail-index');
    await store.createKey('hash-old-a', old);
    const next = keyRecord('key_SUCC0000000000A', 'fail-index', { rolled_from: old.id });
    relay.state.armed = true;
    await t.rejects(store.createKey('hash-succ-a', next), 'the roll fails');
    relay.state.armed = false;
    t.equal(relay.state.refused, 1, 'the index write was refused');
    await nothingLeft(t, store, 'fail-index', old.id, 'hash-succ-a', next.id);
  });

  t.test('the confirm fails: the stored successor (record and index) is undone and its claim freed', async (t) => {
    await redis.client.flushdb();
    const { store, relay } = await open(t, (c) => c.includes(confirmSha) || c.includes(confirmLua.slice(-60)));
    const old = keyRecord('key_OLD00000000000B', 'fail-confirm');
    await store.createKey('hash-old-b', old);
    const next = keyRecord('key_SUCC0000000000B', 'fail-confirm', { rolled_from: old.id });
    relay.state.armed = true;
    await t.rejects(store.createKey('hash-succ-b', next), 'the roll fails');
    relay.state.armed = false;
    t.equal(relay.state.refused, 1, 'the confirm was refused');
    await nothingLeft(t, store, 'fail-confirm', old.id, 'hash-succ-b', next.id);
  });

  t.test("a pending claim left by a roll that died after storing its successor: dropped with the successor's record", async (t) => {
    await redis.client.flushdb();
    const { store } = await open(t, () => false);
    const old = keyRecord('key_OLD00000000000C', 'fail-died');
    await store.createKey('hash-old-c', old);
    // What the roll had written when its process died: claim pending, record and index stored, not confirmed.
    await redis.client.hset(K.keysRolled('fail-died'), old.id, '~key_DEAD0000000000C');
    await redis.client.sadd(K.accountKeys('fail-died'), 'key_DEAD0000000000C');
    const dead = keyRecord('key_DEAD0000000000C', 'fail-died', { rolled_from: old.id });
    // Its record as createKey writes it (redis-store.ts): the fields reads parse, the rest as JSON.
    const { name, version, ...rest } = dead;
    await redis.client.hset(K.keyRecord('hash-dead-c'), { rec: JSON.stringify(rest), name, active: '1', rl: '', v: version });
    await redis.client.set(K.keyIdIndex(dead.id), 'hash-dead-c');
    t.ok(await store.getKeyByHash('hash-dead-c'), 'the dead roll’s successor authenticates (its key was never shown)');
    const next = keyRecord('key_SUCC0000000000C', 'fail-died', { rolled_from: old.id });
    t.equal(await store.createKey('hash-succ-c', next), 'created', 'the next roll takes the claim after its wait');
    t.equal(await store.getKeyByHash('hash-dead-c'), null, 'and the never-shown successor is gone: it authenticates nowhere');
    t.equal(await redis.client.exists(K.keyIdIndex(dead.id)), 0, 'its id index too');
    t.strictSame(await redis.client.hgetall(K.keysRolled('fail-died')), { [old.id]: next.id });
  });
}
