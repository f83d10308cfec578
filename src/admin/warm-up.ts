/**
 * Everything a request may need is loaded before `/readyz` answers 200 (SPEC §13 "No first-use stalls"):
 * the first request that needed the fallback tokenizer used to import it and stall the whole process for
 * 380–630 ms (importing `gpt-tokenizer/model/gpt-4o` blocks the event loop 400–500 ms by itself), and the
 * first presigned URL paid the AWS SDK's lazy loading (30–125 ms measured). Here both are paid once at
 * boot, after the listeners are up and before the gateway reports ready, so a load balancer sends no
 * traffic into the stall. The admin `/healthz` may itself wait while the import runs (docs/security.md).
 * undici compiles its HTTP parser (WebAssembly, synchronously) on its first connection: 10–40 ms measured;
 * one request to our own `/healthz` pays it here instead of the first upstream call.
 *
 * Lua scripts need nothing here: the store reads and defines them before the gateway is built
 * (store/redis-store.ts), hold and settle are SCRIPT LOADed in the script pipe's handshake, and Redis
 * caches any other script on its first EVAL: a round trip, not a stall.
 */
import type { Tokenizer } from '../meter/tokenizer.ts';
import type { S3Config } from '../config/schema.ts';
import { filesConfigured } from '../shares/file-urls.ts';
import { createPresigner } from '../shares/presign.ts';
import type { Logger } from '../obs/logger.ts';
import { Client } from 'undici';

/** `loading` until every piece is loaded; `failed` when one could not be (logged; requests fall back). */
export type WarmUpState = 'idle' | 'loading' | 'done' | 'failed';

export interface WarmUp {
  /**
   * Loads every piece once; concurrent and later calls share the first run. Never rejects. `selfUrl`
   * (the admin listener's `/healthz`) gets one request through undici, which compiles its parser.
   */
  run(selfUrl?: string): Promise<void>;
  readonly state: WarmUpState;
}

/**
 * `s3` is `shares.s3`: when files are configured, one URL is presigned with throwaway credentials (local
 * HMAC, no network), which loads and compiles the same SDK code every real presign runs.
 */
export function createWarmUp(d: { tokenizer: Tokenizer; s3?: S3Config | undefined; logger: Pick<Logger, 'warn' | 'error'> }): WarmUp {
  let state: WarmUpState = 'idle';
  let running: Promise<void> | undefined;

  async function presignOnce(s3: S3Config): Promise<void> {
    const presigner = createPresigner(
      {
        region: s3.region,
        bucket: s3.bucket,
        forcePathStyle: s3.forcePathStyle,
        ...(s3.endpoint !== undefined && { endpoint: s3.endpoint }),
        accessKeyId: 'warm-up',
        secretAccessKey: 'warm-up',
      },
      Date.now,
    );
    await presigner.presignGet('warm-up/warm-up', 60, 'attachment');
    await presigner.presignPut('warm-up/warm-up', 'application/octet-stream', 1, 60);
  }

  /** One GET on a client of its own, closed after: no socket is left to the drain. */
  async function requestOnce(url: string): Promise<void> {
    const u = new URL(url);
    const client = new Client(u.origin);
    try {
      const res = await client.request({ method: 'GET', path: u.pathname, headersTimeout: 10_000, bodyTimeout: 10_000 });
      await res.body.dump();
    } finally {
      await client.close();
    }
  }

  return {
    get state() {
      return state;
    },
    run(selfUrl) {
      running ??= (async () => {
        state = 'loading';
        const pieces: [string, Promise<void>][] = [['tokenizer', d.tokenizer.load()]];
        if (selfUrl) pieces.push(['http client', requestOnce(selfUrl)]);
        if (d.s3 && filesConfigured(d.s3)) pieces.push(['s3 presigner', presignOnce(d.s3)]);
        const results = await Promise.allSettled(pieces.map(([, p]) => p));
        const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [[pieces[i]![0], r.reason] as const] : []));
        // Ready anyway: a request that needs a piece that failed loads it again then (the tokenizer) or
        // answers its own error (S3); refusing readiness forever would take the instance out for good.
        for (const [piece, err] of failed) d.logger.error({ piece, err: (err as Error)?.message }, 'warm-up failed');
        state = failed.length > 0 ? 'failed' : 'done';
      })();
      return running;
    },
  };
}
