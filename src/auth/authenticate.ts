/**
 * Bearer-key authentication (SPEC §1.1, §2a). Order: header shape → key shape → cache → (failed-auth
 * limiter) → store. A key already known valid is never refused by the failed-auth limiter; known-bad
 * attempts past the limit get 429 without a store lookup. The full key never leaves this function:
 * only its hash is used, and errors never echo it.
 */
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../http/errors.ts';
import type { FailedAuthLimiter } from './failed-auth-limiter.ts';
import type { KeyCache } from './key-cache.ts';
import { hashKey, isWellFormedKey } from './keys.ts';
import type { KeyRecord, Scope } from '../store/types.ts';

export type AuthFailure = 'missing' | 'malformed' | 'unknown' | 'disabled' | 'throttled';

export interface Authenticator {
  /** The key record of the request's bearer key, or a 401/429 GatewayError. */
  authenticate(req: IncomingMessage): Promise<KeyRecord>;
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

export function createAuthenticator(d: { keys: KeyCache; failed: FailedAuthLimiter; onFailure?: (reason: AuthFailure) => void }): Authenticator {
  async function refuse(address: string, reason: AuthFailure): Promise<never> {
    d.onFailure?.(reason);
    const wait = await d.failed.fail(address);
    if (wait > 0) throw throttled(wait);
    if (reason === 'missing') throw new GatewayError('missing_api_key', 'Missing API key: send it as Authorization: Bearer <key>.');
    throw new GatewayError('invalid_api_key', reason === 'disabled' ? 'This API key is disabled.' : 'Invalid API key.');
  }

  return {
    async authenticate(req) {
      const address = req.socket.remoteAddress ?? 'unknown';
      const m = BEARER.exec(req.headers.authorization ?? '');
      if (!m) return refuse(address, 'missing');
      const key = m[1]!;
      const hash = isWellFormedKey(key) ? hashKey(key) : undefined;
      const cached = hash === undefined ? undefined : d.keys.peek(hash);
      if (cached?.active) return cached;
      // Known-bad and unknown keys pass the failed-auth limiter first: past the limit, no store lookup.
      const wait = await d.failed.blockedFor(address);
      if (wait > 0) {
        d.onFailure?.('throttled');
        throw throttled(wait);
      }
      if (hash === undefined) return refuse(address, 'malformed');
      const record = cached === undefined ? await d.keys.lookup(hash) : cached;
      if (!record) return refuse(address, 'unknown');
      if (!record.active) return refuse(address, 'disabled');
      return record;
    },
  };
}

function throttled(ms: number): GatewayError {
  const s = Math.max(1, Math.ceil(ms / 1000));
  return new GatewayError('rate_limit_exceeded', `Too many failed authentication attempts from this address; retry in ${s}s.`, {
    headers: { 'retry-after': String(s), 'retry-after-ms': String(Math.ceil(ms)), 'x-should-retry': 'false' },
  });
}
