/**
 * The console's part of the Redis store (SPEC §9): sign-in tokens and sessions, kept only under the
 * SHA-256 of their secret, and the operator's reads (accounts, newest-first ledger, an account's shares).
 */
import { Cluster, Redis } from 'ioredis';
import * as K from './redis-keys.ts';
import { guard, parseEntry } from './redis-records.ts';
import type { ConsoleGrant, ConsoleSession, Store } from './types.ts';

type ConsoleStore = Pick<
  Store,
  | 'putLoginToken'
  | 'takeLoginToken'
  | 'putSession'
  | 'getSession'
  | 'deleteSession'
  | 'deleteAccountSessions'
  | 'listAccounts'
  | 'ledgerBefore'
>;

export function redisConsoleStore(redis: Redis | Cluster): ConsoleStore {
  const cluster = redis instanceof Cluster;
  return {
    putLoginToken: (hash, grant, ttl) => guard(redis.set(K.consoleLogin(hash), JSON.stringify(grant), 'EX', ttl).then(() => undefined)),
    takeLoginToken: (hash) => guard(redis.getdel(K.consoleLogin(hash)).then((v) => (v ? (JSON.parse(v) as ConsoleGrant) : null))),
    putSession: (hash, session, ttl) =>
      guard(
        (async () => {
          await redis.set(K.consoleSession(hash), JSON.stringify(session), 'EX', ttl);
          if (session.account === null) return;
          // The index lives as long as its longest-lived session (NX: a new index; GT: only ever extended,
          // so a short session cannot expire it under a longer one). Members of ended sessions are harmless.
          const index = K.consoleSessions(session.account);
          await Promise.all([redis.sadd(index, hash), redis.expire(index, ttl, 'NX'), redis.expire(index, ttl, 'GT')]);
        })(),
      ),
    getSession: (hash) => guard(redis.get(K.consoleSession(hash)).then((v) => (v ? (JSON.parse(v) as ConsoleSession) : null))),
    deleteSession: (hash) => guard(redis.del(K.consoleSession(hash)).then(() => undefined)),
    deleteAccountSessions: (acct) =>
      guard(
        (async () => {
          const index = K.consoleSessions(acct);
          const hashes = await redis.smembers(index);
          // One key per DEL: session keys live in different Cluster slots.
          const deleted = await Promise.all(hashes.map((h) => redis.del(K.consoleSession(h))));
          // Only the members read leave the index: a session signed in meanwhile stays listed, so the next
          // "sign all members out" reaches it (deleting the whole index would orphan it for its lifetime).
          if (hashes.length > 0) await redis.srem(index, ...hashes);
          return deleted.reduce((n, d) => n + d, 0);
        })(),
      ),
    listAccounts: (search, limit) =>
      guard(
        (async () => {
          const needle = search.toLowerCase();
          const ids = new Set<string>();
          const nodes = cluster ? (redis as Cluster).nodes('master') : [redis as Redis];
          for (const node of nodes) {
            let cursor = '0';
            do {
              const [next, names] = await node.scan(cursor, 'MATCH', K.ACCOUNT_KEYS_PATTERN, 'COUNT', 1000);
              cursor = next;
              for (const n of names) {
                const id = K.ACCOUNT_OF_KEY.exec(n)?.[1];
                if (id !== undefined && id.toLowerCase().includes(needle)) ids.add(id);
              }
            } while (cursor !== '0');
          }
          return [...ids].sort().slice(0, limit);
        })(),
      ),
    ledgerBefore: (acct, before, limit) =>
      guard(
        (async () => {
          const rows = await redis.xrevrange(K.ledger(acct), before ? `(${before}` : '+', '-', 'COUNT', limit);
          return (rows as [string, string[]][]).map(parseEntry);
        })(),
      ),
  };
}
