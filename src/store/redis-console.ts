/**
 * The console's part of the Redis store (SPEC §9): sign-in tokens and sessions, kept only under the
 * SHA-256 of their secret, each account's link generation (bumped when its sessions are ended, so the
 * links minted before stop working), and the operator's reads (accounts, newest-first ledger, an account's shares).
 */
import { Cluster, Redis } from 'ioredis';
import * as K from './redis-keys.ts';
import { guard, ledgerBefore as readBefore } from './redis-records.ts';
import { MAX_LINK_TTL_SECONDS, type ConsoleGrant, type ConsoleSession, type Store } from './types.ts';

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

/**
 * How long an account's link generation lives after its last mint or end: longer than any token
 * (MAX_LINK_TTL_SECONDS), so a token stamped with generation n always finds n or more. Kept by a mint's
 * GETEX, atomically with the read, so it cannot expire between the read and the token's write.
 */
export const LINK_GENERATION_TTL_SECONDS = 2 * MAX_LINK_TTL_SECONDS;

/** A stored sign-in token: the grant, and for a member the link generation it was minted under (absent: 0). */
interface StoredGrant extends ConsoleGrant {
  gen?: number;
}

export function redisConsoleStore(redis: Redis | Cluster): ConsoleStore {
  const cluster = redis instanceof Cluster;
  return {
    putLoginToken: (hash, grant, ttl) =>
      guard(
        (async () => {
          let stored: StoredGrant = grant;
          if (grant.account !== null) {
            const gen = Number(await redis.getex(K.consoleLinkGeneration(grant.account), 'EX', LINK_GENERATION_TTL_SECONDS));
            if (gen > 0) stored = { account: grant.account, gen };
          }
          await redis.set(K.consoleLogin(hash), JSON.stringify(stored), 'EX', ttl);
        })(),
      ),
    // The generation is read after the token is taken, on a member's sign-in only: one GET more per sign-in,
    // none per console page.
    takeLoginToken: (hash) =>
      guard(
        (async () => {
          const v = await redis.getdel(K.consoleLogin(hash));
          if (!v) return null;
          const { account, gen = 0 } = JSON.parse(v) as StoredGrant;
          if (account !== null && gen < Number(await redis.get(K.consoleLinkGeneration(account)))) return null;
          return { account };
        })(),
      ),
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
          const generation = K.consoleLinkGeneration(acct);
          // The account's links minted before are revoked first, in the read's round trip (one slot, one
          // connection, sent in this order): a link opened once the read is answered finds its generation passed.
          const [, , hashes] = await Promise.all([
            redis.incr(generation),
            redis.expire(generation, LINK_GENERATION_TTL_SECONDS),
            redis.smembers(index),
          ]);
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
          const stream = K.ledger(acct);
          return readBefore(
            (end, count) => redis.xrevrange(stream, end, '-', 'COUNT', count) as Promise<[string, string[]][]>,
            before || undefined,
            limit,
          );
        })(),
      ),
  };
}
