// A roll racing a change of its old key (docs/keys.md "Rotation"), on the embedded store and on a real
// Redis: the roll reads the old key, then claims and stores the successor. A PATCH that disables the old
// key, or expires it, landing between the two (before the claim, or after it, before the roll answers)
// must not leave a working successor: the successor is disabled (201, as a roll of a disabled key) or
// undone (409 key_not_rollable, as a roll of an expired key). The PATCH runs at the exact point through
// a hook on the real store's createKey.
import t from 'tap';
import type { Test } from 'tap';
import { hashKey } from '../../src/auth/keys.ts';
import { createKeyTable } from '../../src/auth/key-table.ts';
import { GatewayError } from '../../src/http/errors.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import * as K from '../../src/store/redis-keys.ts';
import type { KeyPatch, Store } from '../../src/store/types.ts';
import { startRedis } from '../helpers/redis.ts';

const redis = await startRedis(t);
const stores: [string, (t: Test) => Promise<Store>][] = [
  [
    'embedded store',
    async (t) => {
      const s = createMemoryStore();
      t.teardown(() => s.close());
      return s;
    },
  ],
];
if (redis) {
  stores.push([
    'Redis',
    async (t) => {
      const s = await createRedisStore({ url: redis.url, commandTimeoutMs: 300, settledTtlSeconds: 4260 });
      t.teardown(() => s.close());
      return s;
    },
  ]);
}

/**
 * The store, with `during(oldId)` run right before (`'claim'`) or right after (`'stored'`) a roll's
 * createKey; `made` collects the hashes of the successors it stored.
 */
function hooked(store: Store, at: 'claim' | 'stored', during: (oldId: string) => Promise<unknown>, made: string[] = []): Store {
  return {
    ...store,
    async createKey(hash, record, caps) {
      if (record.rolled_from !== undefined) made.push(hash);
      if (record.rolled_from !== undefined && at === 'claim') await during(record.rolled_from);
      const created = await store.createKey(hash, record, caps);
      if (record.rolled_from !== undefined && at === 'stored') await during(record.rolled_from);
      return created;
    },
  };
}

let n = 0;
for (const [name, open] of stores) {
  for (const at of ['claim', 'stored'] as const) {
    const where = at === 'claim' ? 'before its claim' : 'after its successor is stored';

    t.test(`${name}: a key disabled mid-roll (${where}) gets a disabled successor, as a roll of a disabled key`, async (t) => {
      const store = await open(t);
      const patch: KeyPatch = { active: false };
      const keys = createKeyTable({ store: hooked(store, at, (id) => store.updateKey(id, patch)), now: Date.now });
      const account = `race-off-${process.pid}-${++n}`;
      const old = await keys.create({ account, env: 'test', name: 'raced' });
      const r = await keys.roll(old.record.id, 600);
      t.ok(r, 'rolled (201)');
      t.equal(r!.record.active, false, 'the answer shows the successor disabled');
      t.equal((await store.getKeyByHash(hashKey(r!.key)))?.active, false, 'and it is stored disabled: its key is refused');
      t.equal((await keys.get(old.record.id))?.active, false, 'the old key stays disabled');
      t.equal(r!.previous.id, old.record.id);
    });

    t.test(`${name}: a key expired mid-roll (${where}) is not rolled: 409, no successor left`, async (t) => {
      const store = await open(t);
      const past = new Date(Date.now() - 1000).toISOString();
      const hashes: string[] = [];
      const keys = createKeyTable({ store: hooked(store, at, (id) => store.updateKey(id, { expires_at: past }), hashes), now: Date.now });
      const account = `race-exp-${process.pid}-${++n}`;
      const old = await keys.create({ account, env: 'test', name: 'raced' });
      const e = await keys.roll(old.record.id, 600).then(
        () => undefined,
        (e: unknown) => e,
      );
      t.ok(e instanceof GatewayError, 'refused');
      t.equal((e as GatewayError | undefined)?.code, 'key_not_rollable');
      t.match((e as GatewayError | undefined)?.message, `Key ${old.record.id} expired at ${past}`);
      t.strictSame(
        (await keys.list(account)).map((k) => k.id),
        [old.record.id],
        'no successor listed',
      );
      t.equal((await keys.get(old.record.id))?.expires_at, past, 'the old key keeps the expiry its PATCH set');
      t.equal(hashes.length, 1, 'one successor was tried');
      t.equal(await store.getKeyByHash(hashes[0]!), null, 'its record is gone: its key authenticates nowhere');
      if (store.kind === 'redis') {
        const c = redis!.client;
        t.equal(await c.scard(K.accountKeys(account)), 1, 'the successor left the key set');
        t.equal(await c.hlen(K.keysRolled(account)), 0, 'and its claim went with it');
      }
    });

    t.test(`${name}: an expiry moved earlier mid-roll (${where}) holds for both keys; the grace does not undo it`, async (t) => {
      const store = await open(t);
      const soon = new Date(Date.now() + 60_000).toISOString();
      const keys = createKeyTable({ store: hooked(store, at, (id) => store.updateKey(id, { expires_at: soon })), now: Date.now });
      const old = await keys.create({ account: `race-soon-${process.pid}-${++n}`, env: 'test', name: 'raced' });
      const r = await keys.roll(old.record.id, 600);
      t.equal(r?.record.expires_at, soon, 'the successor expires when the old key now does');
      t.equal(r?.previous.expires_at, soon, 'the old key keeps its earlier expiry, not the grace end');
      t.equal((await keys.get(old.record.id))?.expires_at, soon);
      t.equal((await store.getKeyByHash(hashKey(r!.key)))?.expires_at, soon, 'as stored');
    });
  }

  t.test(`${name}: a roll that fails after storing its successor undoes it: no key that nobody received`, async (t) => {
    const store = await open(t);
    const hashes: string[] = [];
    const failing: Store = {
      ...hooked(store, 'stored', async () => {}, hashes),
      // The old key's new expiry (the roll's last write) fails, as a store error or a timeout would.
      updateKey: (id, patch) => (patch.expires_at !== undefined ? Promise.reject(new Error('store down')) : store.updateKey(id, patch)),
    };
    const keys = createKeyTable({ store: failing, now: Date.now });
    const account = `roll-fail-${process.pid}-${++n}`;
    const old = await keys.create({ account, env: 'test', name: 'fails' });
    await t.rejects(keys.roll(old.record.id, 600), /store down/, 'the roll fails (a 5xx: no key shown)');
    t.equal(hashes.length, 1);
    t.equal(await store.getKeyByHash(hashes[0]!), null, 'the successor it stored is gone: it authenticates nowhere');
    t.strictSame(
      (await keys.list(account)).map((k) => k.id),
      [old.record.id],
      'only the old key is listed',
    );
    const again = await createKeyTable({ store, now: Date.now }).roll(old.record.id, 600);
    t.ok(again, 'and the old key is not blocked: it rolls (no claim naming a key nobody has)');
  });
  t.test(`${name}: a roll whose grace write lands with its reply lost leaves the old key as it was`, async (t) => {
    const store = await open(t);
    const hashes: string[] = [];
    let lose = true;
    const losing: Store = {
      ...hooked(store, 'stored', async () => {}, hashes),
      // The old key's grace write reaches the store, and its answer is lost (a timeout after it landed).
      async updateKey(id, patch) {
        const r = await store.updateKey(id, patch);
        if (patch.expires_at !== undefined && lose) {
          lose = false;
          throw new Error('reply lost');
        }
        return r;
      },
    };
    const keys = createKeyTable({ store: losing, now: Date.now });
    const account = `roll-lost-${process.pid}-${++n}`;
    const old = await keys.create({ account, env: 'test', name: 'lost' });
    await t.rejects(keys.roll(old.record.id, 0), /reply lost/, 'the roll fails (a 5xx: no key shown)');
    t.equal(await store.getKeyByHash(hashes[0]!), null, 'its successor is undone');
    const after = await keys.get(old.record.id);
    t.equal(after?.expires_at ?? null, null, 'the old key does not expire: its grace end (now, grace 0) was taken back');
    t.ok(await store.getKeyByHash(hashKey(old.key)), 'and it still authenticates');
    const again = await createKeyTable({ store, now: Date.now }).roll(old.record.id, 600);
    t.equal(again?.record.expires_at ?? null, null, "a retry's successor does not copy a grace end it never asked for");
  });
}
