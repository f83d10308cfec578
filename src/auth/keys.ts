/**
 * API key material (SPEC §1.1): `svc-live-`/`svc-test-` + 32 base58 characters from a CSPRNG
 * (≈ 187 bits), stored only as its SHA-256. The full key exists in memory only while it is created
 * and while a request is authenticated; nothing here logs or stores it.
 */
import { hash } from 'node:crypto';
import { randomBase58 } from '../http/base58.ts';
import type { KeyEnv } from '../store/types.ts';

export const KEY_FORMAT = /^svc-(live|test)-[1-9A-HJ-NP-Za-km-z]{32}$/;

/** A new full key for the environment; shown to the operator once. */
export function generateKey(env: KeyEnv): string {
  return `svc-${env}-${randomBase58(32)}`;
}

/** A new public key id, `key_` + 16 base58. */
export function generateKeyId(): string {
  return `key_${randomBase58(16)}`;
}

/** SHA-256 hex of the full key: the only form in which a key is stored or used as a cache key. */
export function hashKey(key: string): string {
  // One-shot crypto.hash: no Hash object per request (authentication runs on every call).
  return hash('sha256', key, 'hex');
}

/** True when the string has the shape of a Tollgate key (no lookup needed to refuse it otherwise). */
export function isWellFormedKey(key: string): boolean {
  return key.length === 41 && KEY_FORMAT.test(key);
}
