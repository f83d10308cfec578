// The store contract (test/store/contract.ts) on a real 3-master + 3-replica Redis Cluster: the third
// store mode beside the script pipe and plain ioredis on one node (test/store/redis-store.test.ts).
// On a Cluster every script goes through ioredis' Cluster client, routed by its account's hash tag,
// and the global keys (hold bucket index, export index, key records) live on other masters.
import t from 'tap';
import { Cluster } from 'ioredis';
import { startRedisCluster } from '../helpers/redis-cluster.ts';
import { createRedisStore } from '../../src/store/redis-store.ts';
import { runStoreContract } from '../store/contract.ts';
import { keyRecord } from '../store/contract-key-controls.ts';
import * as K from '../../src/store/redis-keys.ts';

const cluster = await startRedisCluster(t);
if (cluster) {
  const open = async (t: Parameters<Parameters<typeof runStoreContract>[1]>[0]) => {
    const store = await createRedisStore({ clusterNodes: cluster.addresses, commandTimeoutMs: 1000, settledTtlSeconds: 4260 });
    t.teardown(() => store.close());
    return store;
  };
  runStoreContract(
    t,
    async (t) => {
      // A fresh keyspace on every master (replicas follow).
      // Ready first: until the slot map is loaded, ioredis counts every startup node as a master.
      const admin = new Cluster(
        cluster.addresses.map((a) => ({ host: a.split(':')[0]!, port: Number(a.split(':')[1]) })),
        { lazyConnect: true },
      );
      await admin.connect();
      await Promise.all(admin.nodes('master').map((n) => n.flushall()));
      await admin.quit();
      return open(t);
    },
    // Another gateway instance: a second store (own connections) on the same cluster, no flush.
    { makePeer: (t) => open(t) },
  );

  // A half-deleted key (docs/keys.md "Deletion"): its account is found by SCAN on every master, and its
  // record, index and account keys are three different slots.
  t.test('deleteKey finishes a half-done delete across masters', async (t) => {
    const admin = new Cluster(
      cluster.addresses.map((a) => ({ host: a.split(':')[0]!, port: Number(a.split(':')[1]) })),
      { lazyConnect: true },
    );
    await admin.connect();
    t.teardown(() => admin.quit());
    const store = await open(t);
    const old = keyRecord('key_CLHaLF00000000A', 'cl-half');
    const next = keyRecord('key_CLHaLF00000000B', 'cl-half', { rolled_from: old.id });
    await store.createKey('hash-cl-half-a', old);
    t.equal(await store.createKey('hash-cl-half-b', next), 'created');
    await admin.del(K.keyRecord('hash-cl-half-b'));
    t.strictSame(await store.deleteKey(next.id), { record: null, hash: 'hash-cl-half-b' }, 'finished');
    t.strictSame(await admin.smembers(K.accountKeys('cl-half')), [old.id], 'its key-set entry is gone');
    t.equal(await admin.exists(K.keysRolled('cl-half')), 0, "and its old key's claim naming it");
    t.equal(await admin.exists(K.keyIdIndex(next.id)), 0, 'and its id index');
    t.equal(await store.deleteKey(next.id), null, 'then it is unknown');
  });
}
