/**
 * Console sign-in and sessions (SPEC §9). A sign-in link carries 32 random bytes (base64url); only the
 * SHA-256 of the token, and of each session id, is stored, so a copy of the store signs nobody in.
 * The token is taken atomically (a second use finds nothing) and the link's redirect strips it from
 * the address bar. The session id travels only in an HttpOnly, SameSite=Strict cookie scoped to /console.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { MAX_LINK_TTL_SECONDS, type ConsoleGrant, type ConsoleSession, type Store } from '../store/types.ts';

export const COOKIE = 'tollgate_console';
/** 32 bytes = 256 bits, base64url without padding: 43 characters. */
const SECRET_BYTES = 32;
const SECRET = /^[A-Za-z0-9_-]{43}$/;
/**
 * Sign-in link lifetimes (SPEC §9: 60..3600, default 300). Decision (docs/console.md): a member's link
 * may live up to 24 h, so an operator can send it by mail to someone in another time zone; an operator
 * link, which reaches every account, stays within SPEC's hour.
 */
export const LINK_TTL = { min: 60, max: 3600, memberMax: MAX_LINK_TTL_SECONDS, fallback: 300 } as const;

const digest = (s: string) => createHash('sha256').update(s).digest('hex');
const secret = () => randomBytes(SECRET_BYTES).toString('base64url');

/** A signed-in browser: its session, and the hash it is stored under. */
export interface Viewer extends ConsoleSession {
  hash: string;
}

export interface ConsoleSessions {
  /** A single-use sign-in link to `<public_url>/console/login?token=…`. */
  mintLink(grant: ConsoleGrant, ttlSeconds?: number): Promise<{ url: string; expires_at: string }>;
  /** Exchanges a token for a new session: the session id (cookie value) and the session, or null. */
  signIn(token: string | undefined): Promise<{ sid: string; session: ConsoleSession } | null>;
  /** The session of the request's cookie, or null. */
  viewer(req: IncomingMessage): Promise<Viewer | null>;
  signOut(viewer: Viewer): Promise<void>;
  /**
   * Ends every session of a member account (SPEC §9's DELETE /admin/console/sessions) and revokes the
   * account's member links minted before, not yet opened; returns how many sessions were live.
   */
  endAccount(account: string): Promise<number>;
  /** The Set-Cookie value for a new session, and the one that clears it. */
  cookie(sid: string): string;
  clearCookie(): string;
}

export interface ConsoleSessionsDeps {
  store: Store;
  now: () => number;
  /** The console's origin (config console.public_url, else the public listener's loopback URL). */
  publicUrl: () => string;
  sessionTtlSeconds: number;
}

/** Reads one cookie from a Cookie header without a parser dependency: `name=value` pairs split on `;`. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export function createConsoleSessions(d: ConsoleSessionsDeps): ConsoleSessions {
  const secure = () => d.publicUrl().startsWith('https:');
  const attributes = () => `Path=/console; HttpOnly; SameSite=Strict${secure() ? '; Secure' : ''}`;
  return {
    async mintLink(grant, ttlSeconds = LINK_TTL.fallback) {
      const token = secret();
      await d.store.putLoginToken(digest(token), grant, ttlSeconds);
      return {
        url: `${d.publicUrl()}/console/login?token=${token}`,
        expires_at: new Date(d.now() + ttlSeconds * 1000).toISOString(),
      };
    },
    async signIn(token) {
      if (token === undefined || !SECRET.test(token)) return null;
      const grant = await d.store.takeLoginToken(digest(token));
      if (!grant) return null;
      const sid = secret();
      const at = d.now();
      const session: ConsoleSession = {
        account: grant.account,
        created_at: new Date(at).toISOString(),
        expires_at: new Date(at + d.sessionTtlSeconds * 1000).toISOString(),
      };
      await d.store.putSession(digest(sid), session, d.sessionTtlSeconds);
      return { sid, session };
    },
    async viewer(req) {
      const sid = readCookie(req.headers.cookie, COOKIE);
      if (sid === undefined || !SECRET.test(sid)) return null;
      const hash = digest(sid);
      const s = await d.store.getSession(hash);
      return s ? { ...s, hash } : null;
    },
    async signOut(viewer) {
      await d.store.deleteSession(viewer.hash);
    },
    endAccount: (account) => d.store.deleteAccountSessions(account),
    cookie: (sid) => `${COOKIE}=${sid}; ${attributes()}; Max-Age=${d.sessionTtlSeconds}`,
    clearCookie: () => `${COOKIE}=; ${attributes()}; Max-Age=0`,
  };
}
