/**
 * Bearer-key authentication (SPEC §1.1, §2a, §12). Order: header shape → key shape → cache → store.
 * The failed-auth limiter throttles malformed, unknown and disabled keys only: a valid key is never
 * refused, whatever its address has sent (behind a NAT one guesser would otherwise lock every client
 * out). So a well-formed key this instance does not know yet is always looked up (misses coalesced,
 * unknown keys negatively cached for auth.negative_ttl_ms); malformed and known-bad keys from a
 * throttled address get 429 without a lookup. What that leaves an attacker: one store GET per fresh
 * random key (a hash lookup, ~1 µs of Redis CPU), answered 429; guessing a 187-bit key stays hopeless.
 * The full key never leaves this function: only its hash is used, and errors never echo it.
 */
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../http/errors.ts';
import type { FailedAuthLimiter } from './failed-auth-limiter.ts';
import type { ClientAddress } from '../http/client-address.ts';
import type { KeyCache } from './key-cache.ts';
import { hashKey, isWellFormedKey } from './keys.ts';
import type { KeyRecord, Scope } from '../store/types.ts';
import { isExpired } from './key-table.ts';

export type AuthFailure = 'missing' | 'malformed' | 'unknown' | 'disabled' | 'expired' | 'throttled';

export interface Authenticator {
  /** The key record of the request's bearer key, or a 401/429 GatewayError. */
  authenticate(req: IncomingMessage): Promise<KeyRecord>;
  /**
   * True while `key` (what authenticate() returned) is still the key as this instance knows it and usable:
   * no change reached the cache since (disable, PATCH, roll, delete, or the cache TTL) and not past its
   * `expires_at`. A map lookup and, for a key with an expiry, a clock compare; no store read. When false,
   * authenticate() again: it refuses a key that is no longer usable and returns the record as it is now.
   */
  current(key: KeyRecord): boolean;
}

const BEARER = /^Bearer[ \t]+(\S+)[ \t]*$/i;

/** Throws 403 unless the key carries the scope. */
export function requireScope(key: KeyRecord, scope: Scope): void {
  if (!key.scopes.includes(scope)) throw new GatewayError('permission_denied', `This API key lacks the '${scope}' scope.`);
}

/** Throws 403 unless the key's model allow-list (empty = all) admits the model. */
export function requireModel(key: KeyRecord, model: string): void {
  if (key.models.length > 0 && !key.models.includes(model)) {
    throw new GatewayError('permission_denied', `This API key may not use model '${model}'.`, { param: 'model' });
  }
}

export function createAuthenticator(d: {
  keys: KeyCache;
  failed: FailedAuthLimiter;
  clientAddress?: ClientAddress;
  onFailure?: (reason: AuthFailure) => void;
  /**
   * The clock `expires_at` is checked against (SPEC §15). Checked on every authentication, cached
   * record or not, so an expiry takes effect on every instance at once, with no invalidation.
   */
  now?: () => number;
}): Authenticator {
  const now = d.now ?? Date.now;
  /** Usable now: active and not past its expiry (keys without one pay a null check). */
  const usable = (r: KeyRecord | null | undefined): r is KeyRecord => !!r?.active && (r.expires_at == null || !isExpired(r, now()));
  const badReason = (r: KeyRecord): AuthFailure => (r.active ? 'expired' : 'disabled');
  const addressOf: ClientAddress = d.clientAddress ?? ((req) => req.socket.remoteAddress ?? 'unknown');
  async function refuse(address: string, reason: AuthFailure): Promise<never> {
    d.onFailure?.(reason);
    const wait = d.failed.fail(address);
    if (wait > 0) throw throttled(wait);
    if (reason === 'missing') throw new GatewayError('missing_api_key', 'Missing API key: send it as Authorization: Bearer <key>.');
    throw new GatewayError(
      'invalid_api_key',
      reason === 'disabled' ? 'This API key is disabled.' : reason === 'expired' ? 'This API key has expired.' : 'Invalid API key.',
    );
  }

  return {
    current: (key) => d.keys.isCurrent(key) && usable(key),
    async authenticate(req) {
      const m = BEARER.exec(req.headers.authorization ?? '');
      if (!m) return refuse(addressOf(req), 'missing');
      const key = m[1]!;
      const hash = isWellFormedKey(key) ? hashKey(key) : undefined;
      const cached = hash === undefined ? undefined : d.keys.peek(hash);
      if (usable(cached)) return cached;
      if (hash !== undefined && cached === undefined) {
        // Not known here yet: looked up whatever the address sent, so a valid key is never refused.
        const record = await d.keys.lookup(hash);
        if (usable(record)) return record;
        return refuse(addressOf(req), record ? badReason(record) : 'unknown');
      }
      // Malformed or known bad: past the limit, 429 without a store lookup.
      const address = addressOf(req);
      const wait = d.failed.blockedFor(address);
      if (wait > 0) {
        d.onFailure?.('throttled');
        throw throttled(wait);
      }
      return refuse(address, hash === undefined ? 'malformed' : cached == null ? 'unknown' : badReason(cached));
    },
  };
}

function throttled(ms: number): GatewayError {
  const s = Math.max(1, Math.ceil(ms / 1000));
  return new GatewayError('rate_limit_exceeded', `Too many failed authentication attempts from this address; retry in ${s}s.`, {
    headers: { 'retry-after': String(s), 'retry-after-ms': String(Math.ceil(ms)), 'x-should-retry': 'false' },
  });
}
