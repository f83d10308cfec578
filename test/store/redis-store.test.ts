// The Redis store against the store contract, plus what only Redis has: Cluster hash tags and outages.
import { createConnection, createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { Test } from 'tap';
import { GatewayError } from '../../src/http/errors.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import type { Invalidation, Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';
import { runStoreContract } from './contract.ts';
import { TS, waitFor } from './harness.ts';

/**
 * A TCP relay in front of Redis. `cut()` drops every connection (the clients reconnect); after it, on
 * each new connection the replies stop at the first subscribe confirmation, which is held back for good.
 */
async function startHoldingRelay(t: Test, port: number): Promise<{ url: string; held: () => number; cut(): void }> {
  const open = new Set<Socket>();
  let holding = false;
  let held = 0;
  const server = createServer((client) => {
    const upstream = createConnection(port, '127.0.0.1');
    open.add(client).add(upstream);
    let stopped = false;
    const holdHere = holding;
    upstream.on('data', (chunk: Buffer) => {
      // RESP2 array or RESP3 push: the reply to SUBSCRIBE starts with the bulk string "subscribe".
      if (holdHere && !stopped && chunk.includes('$9\r\nsubscribe\r\n')) ((stopped = true), held++);
      if (!stopped) client.write(chunk);
    });
    client.on('data', (chunk: Buffer) => upstream.write(chunk));
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      a.on('error', () => b.destroy());
      a.on('close', () => {
        open.delete(a);
        b.destroy();
      });
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.close();
    for (const s of open) s.destroy();
  });
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    held: () => held,
    cut() {
      holding = true;
      for (const s of open) s.destroy();
    },
  };
}

// 300 ms: fail fast like production (NOTES §1), yet far above a loopback round trip (~0.1 ms).
const COMMAND_TIMEOUT_MS = 300;
// The settled marker's lifetime (production derives it from the config: credit.ts settledMarkerTtlSeconds).
const SETTLED_TTL_S = 4260;

async function openStore(t: Test, url: string): Promise<Store> {
  const store = await createRedisStore({ url, commandTimeoutMs: COMMAND_TIMEOUT_MS, settledTtlSeconds: SETTLED_TTL_S });
  t.teardown(() => store.close());
  return store;
}

const redis = await startRedis(t);
if (redis) {
  runStoreContract(
    t,
    async (t) => {
      await redis.client.flushdb();
      return openStore(t, redis.url);
    },
    // Another gateway instance: a second store (own connections) on the same server, no flush.
    { makePeer: (t) => openStore(t, redis.url) },
  );

  t.test('every key of an account carries the {acct:<id>} hash tag', async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    const accounts = ['acme', 'team.b:eu-1_x'];
    for (const acct of accounts) {
      await store.createKey(`hash-${acct}`, {
        id: `key_${acct}`,
        account: acct,
        env: 'live',
        name: 'k',
        active: true,
        scopes: ['chat'],
        models: [],
        rate_limits: null,
        created_at: TS,
        last4: 'abcd',
        version: 1,
      });
      await store.grant(acct, 1000, 'idem-1', 'note', TS);
      await store.hold(acct, 'req-settled', 100, 5_000);
      await store.hold(acct, 'req-open', 100, 9_000_000_000_000);
      await store.hold(acct, 'req-expired', 100, 1_000);
      await store.settle({
        account: acct,
        requestId: 'req-settled',
        costMicros: 10,
        keyId: `key_${acct}`,
        model: 'm',
        promptTokens: 1,
        completionTokens: 1,
        usageSource: 'upstream',
        ts: TS,
      });
    }
    await store.reapExpiredHolds(2_000, TS);
    await store.putShare({ slug: 'A1b2C3d4E5f6G7h8J9k1m2', account: 'acme', created_at: TS, snapshot: '{}', files: [], revoked_at: null });

    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await redis.client.scan(cursor, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    // Keys that belong to no account: key records (looked up by hash), the id index, shares, the hold index.
    const global = /^(tg:key:|tg:keyid:|tg:share:)|^tg:holds$|^tg:ledger:accounts$/;
    const stray = keys.filter((k) => !global.test(k) && !accounts.some((a) => k.startsWith(`{acct:${a}}:`)));
    t.strictSame(stray, [], 'no key outside an account tag except the global ones');
    for (const acct of accounts) {
      const mine = keys
        .filter((k) => k.startsWith(`{acct:${acct}}:`))
        .map((k) => k.slice(`{acct:${acct}}:`.length))
        .sort();
      // acme published the share: its account's share list (the console's) is in its slot too.
      t.strictSame(
        mine,
        ['bal', 'done:req-settled', 'holds', 'idem', 'keys', 'ledger', ...(acct === 'acme' ? ['share-list'] : [])],
        `${acct}: balance, ledger, idempotency, holds, settled marker, key set`,
      );
    }
  });

  t.test('the settled marker lives for the configured TTL, and is the only per-request key left behind', async (t) => {
    await redis.client.flushdb();
    const store = await openStore(t, redis.url);
    await store.grant('acme', 1000, undefined, undefined, TS);
    const before = await redis.client.dbsize();
    for (const id of ['req-1', 'req-2']) {
      await store.hold('acme', id, 100, 9_000_000_000_000);
      await store.settle({
        account: 'acme',
        requestId: id,
        costMicros: 10,
        keyId: 'key_a',
        model: 'm',
        promptTokens: 1,
        completionTokens: 1,
        usageSource: 'upstream',
        ts: TS,
      });
    }
    // Two settled requests: their two markers (holds hash and index emptied, so deleted); nothing else grew.
    t.equal(await redis.client.dbsize(), before + 2, 'one key per settled request');
    for (const id of ['req-1', 'req-2']) {
      const ttl = await redis.client.pttl(`{acct:acme}:done:${id}`);
      t.ok(
        ttl > (SETTLED_TTL_S - 5) * 1000 && ttl <= SETTLED_TTL_S * 1000,
        `${id}: marker TTL ${ttl} ms is the configured ${SETTLED_TTL_S} s`,
      );
    }
  });

  t.test('Redis down: fails fast with store_unavailable, then the same store recovers', async (t) => {
    const server = await startRedis(t, { restartable: true });
    if (!server) return;
    const store = await openStore(t, server.url);
    const received: Invalidation[] = [];
    store.onInvalidation((m) => received.push(m));
    await store.grant('acme', 1000, undefined, undefined, TS);

    await server.stop();
    const calls: [string, () => Promise<unknown>][] = [
      ['getAccount', () => store.getAccount('acme')],
      ['grant (Lua)', () => store.grant('acme', 1, undefined, undefined, TS)],
      ['hold (Lua)', () => store.hold('acme', 'req-1', 1, 9_000_000_000_000)],
      ['getKeyByHash', () => store.getKeyByHash('hash-1')],
    ];
    for (const [name, call] of calls) {
      const started = Date.now();
      const err = await call().then(
        () => null,
        (e: unknown) => e,
      );
      t.ok(err instanceof GatewayError, `${name} rejects with a GatewayError`);
      t.equal((err as GatewayError | null)?.code, 'store_unavailable', `${name}: store_unavailable`);
      // A bound that proves "no hang" (ioredis defaults would queue for ~74 s), not a speed check.
      t.ok(Date.now() - started < 5000, `${name} does not hang`);
    }
    t.equal(await store.ping(), false, 'ping reports the outage');

    await server.start();
    const until = Date.now() + 15_000;
    while (!(await store.ping()) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    t.equal(await store.ping(), true, 'the same store instance reconnects');
    // The restarted server is empty (--save ''), and its script cache too: grant must reload grant.lua.
    const g = await store.grant('acme', 250, 'idem-after', undefined, TS);
    t.equal(g.balance_micros, 250, 'Lua scripts work again after the restart');
    t.strictSame(await store.getAccount('acme'), { id: 'acme', balance_micros: 250, held_micros: 0 });

    // The subscriber connection re-subscribes by itself; keep publishing until one message lands.
    const msg: Invalidation = { kind: 'share', slug: 'A1b2C3d4E5f6G7h8J9k1m2' };
    const subUntil = Date.now() + 15_000;
    while (received.length === 0 && Date.now() < subUntil) {
      await store.publish(msg);
      await new Promise((r) => setTimeout(r, 100));
    }
    t.strictSame(received[0], msg, 'invalidations flow again after the restart');
  });

  /**
   * A store behind a holding relay, its subscriber just reconnected with the SUBSCRIBE reply held back;
   * collects the process's unhandled rejections and what reached the store's error handler.
   */
  async function subscribePending(t: Test): Promise<{ store: Store; errors: Error[]; rejections: unknown[] }> {
    const rejections: unknown[] = [];
    const onRejection = (e: unknown) => void rejections.push(e);
    process.on('unhandledRejection', onRejection);
    t.teardown(() => void process.off('unhandledRejection', onRejection));
    const relay = await startHoldingRelay(t, redis!.port);
    const errors: Error[] = [];
    const store = await createRedisStore({
      url: relay.url,
      commandTimeoutMs: COMMAND_TIMEOUT_MS,
      settledTtlSeconds: SETTLED_TTL_S,
      onError: (e) => errors.push(e),
    });
    relay.cut();
    await waitFor(() => relay.held() > 0, 5000, 'the SUBSCRIBE sent after the reconnect');
    return { store, errors, rejections };
  }

  t.test('closing while the subscriber re-subscribes after a reconnect leaves no unhandled rejection', async (t) => {
    const { store, errors, rejections } = await subscribePending(t);
    // Its reply never comes: close now, as a shutdown may at any moment.
    await store.close();
    await sleep(50);
    t.same(rejections.map(String), [], "the pending SUBSCRIBE failed into the store's error handler, not unhandled");
    t.ok(
      errors.some((e) => /Connection is closed|timed out/.test(e.message)),
      "the store's error handler saw it",
    );
  });

  t.test('a re-subscribe whose reply is late fails into the error handler (unhandled, Node would exit)', async (t) => {
    const { store, errors, rejections } = await subscribePending(t);
    t.teardown(() => store.close());
    // A Redis slow to answer after a restart: the command times out while the store stays open.
    await waitFor(() => errors.some((e) => /timed out/.test(e.message)), 5000, 'the timeout reported to onError');
    await sleep(50);
    t.same(rejections.map(String), [], 'no unhandled rejection');
  });
}
