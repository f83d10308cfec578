/**
 * The embedded store's console sign-in tokens and sessions (SPEC §9), by the SHA-256 of their secret,
 * each with its expiry, and each account's link generation; the twin of redis-console.ts's keys.
 */
import type { ConsoleGrant, ConsoleSession, Store } from './types.ts';

type SessionStore = Pick<
  Store,
  'putLoginToken' | 'takeLoginToken' | 'putSession' | 'getSession' | 'deleteSession' | 'deleteAccountSessions'
>;

const clone = <T>(v: T): T => structuredClone(v);

export function memorySessions(now: () => number): SessionStore {
  // Console tokens and sessions by hash, each with its expiry (ms); expired entries are dropped on read.
  const loginTokens = new Map<string, { grant: ConsoleGrant; gen: number; expiresAt: number }>();
  const sessions = new Map<string, { session: ConsoleSession; expiresAt: number }>();
  // Each member account's link generation, bumped when its sessions are ended (absent: 0); a token keeps the
  // one it was minted under. An entry per account ever ended, as Redis keeps one per account ended lately.
  const linkGenerations = new Map<string, number>();
  const generation = (account: string | null) => (account === null ? 0 : (linkGenerations.get(account) ?? 0));
  // Entries that are never read again would stay: each time the two maps have doubled, drop the expired.
  let sweepAt = 1024;
  function sweepExpired(): void {
    if (loginTokens.size + sessions.size < sweepAt) return;
    const t = now();
    for (const [k, v] of loginTokens) if (v.expiresAt <= t) loginTokens.delete(k);
    for (const [k, v] of sessions) if (v.expiresAt <= t) sessions.delete(k);
    sweepAt = Math.max(1024, 2 * (loginTokens.size + sessions.size));
  }
  return {
    async putLoginToken(hash, grant, ttlSeconds) {
      sweepExpired();
      loginTokens.set(hash, { grant: clone(grant), gen: generation(grant.account), expiresAt: now() + ttlSeconds * 1000 });
    },
    async takeLoginToken(hash) {
      const t = loginTokens.get(hash);
      loginTokens.delete(hash);
      return t && t.expiresAt > now() && t.gen >= generation(t.grant.account) ? t.grant : null;
    },
    async putSession(hash, session, ttlSeconds) {
      sweepExpired();
      sessions.set(hash, { session: clone(session), expiresAt: now() + ttlSeconds * 1000 });
    },
    async getSession(hash) {
      const s = sessions.get(hash);
      if (s && s.expiresAt > now()) return clone(s.session);
      sessions.delete(hash);
      return null;
    },
    async deleteSession(hash) {
      sessions.delete(hash);
    },
    async deleteAccountSessions(acct) {
      linkGenerations.set(acct, generation(acct) + 1);
      let n = 0;
      for (const [hash, s] of sessions) {
        if (s.session.account !== acct) continue;
        sessions.delete(hash);
        if (s.expiresAt > now()) n++;
      }
      return n;
    },
  };
}
