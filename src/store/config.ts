/** The `store` section: where Redis is (REDIS_URL / REDIS_CLUSTER_NODES win over the file), and its command timeout. */
import { at, list, MAX_TIMER_MS, noUnknown, num, object, oneOf, optional, str } from '../config/fields.ts';
import { ConfigError } from '../config/errors.ts';
import { parseClusterNodes } from './cluster-nodes.ts';
import { DEBIT_LAYOUTS, type DebitLayout } from './debit-layout.ts';

export interface StoreConfig {
  readonly redisUrl: string | undefined;
  readonly clusterNodes: readonly string[];
  readonly commandTimeoutMs: number;
  /** How debits are written to the ledger stream (debit-layout.ts): `fields` while older instances still run. */
  readonly debitEntries: DebitLayout;
  /**
   * How long a landed settle is kept to be sent again when a Redis master's connection ends or a node
   * stops answering (credit.ts, docs/ledger.md "Failover"); 0 keeps none.
   */
  readonly resendSettlesMs: number;
}

export const STORE_FIELDS = ['redis_url', 'cluster_nodes', 'command_timeout_ms', 'debit_entries', 'resend_settles_ms'] as const;

/** Compiles `store`; `env` has the SPEC §6 overrides, empty strings already dropped. */
export function storeSection(v: unknown, env: NodeJS.ProcessEnv): StoreConfig {
  const store = object(v, 'store', true);
  noUnknown(store, 'store', STORE_FIELDS);
  const clusterNodes =
    env.REDIS_CLUSTER_NODES !== undefined
      ? env.REDIS_CLUSTER_NODES.split(',')
          .map((s) => s.trim())
          .filter(Boolean)
      : list(store.cluster_nodes, 'store.cluster_nodes', true).map((n, i) => str(n, at('store.cluster_nodes', i)));
  try {
    parseClusterNodes(clusterNodes);
  } catch (e) {
    throw new ConfigError(
      env.REDIS_CLUSTER_NODES !== undefined ? 'REDIS_CLUSTER_NODES (environment)' : 'store.cluster_nodes',
      (e as Error).message,
    );
  }
  return {
    redisUrl: env.REDIS_URL || optional(store.redis_url, 'store.redis_url'),
    clusterNodes,
    commandTimeoutMs: num(store.command_timeout_ms, 'store.command_timeout_ms', { fallback: 500, min: 10, max: MAX_TIMER_MS }),
    debitEntries: oneOf(str(store.debit_entries, 'store.debit_entries', 'compact'), DEBIT_LAYOUTS, 'store.debit_entries'),
    resendSettlesMs: num(store.resend_settles_ms, 'store.resend_settles_ms', { fallback: 5_000, min: 0, max: 60_000 }),
  };
}
