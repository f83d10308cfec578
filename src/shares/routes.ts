/**
 * Public share routes (SPEC §1.4): `POST /v1/shares` (scope `shares`), `GET /v1/shares/{slug}` (no key:
 * the slug is the capability), `DELETE /v1/shares/{slug}` (a key of the owning account).
 */
import type { ServerResponse } from 'node:http';
import type { RequestContext } from '../http/context.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import type { Route } from '../http/router.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { ProcessBodyBudget } from '../limits/body-budget.ts';
import type { FailureWindow } from '../auth/failure-window.ts';
import { requireScope, type Authenticator } from '../auth/authenticate.ts';
import type { ClientAddress } from '../http/client-address.ts';
import { GatewayError } from '../http/errors.ts';
import { readShareBody, type ShareBodyLimits } from './share-body.ts';
import type { ShareService } from './service.ts';
import { validateSlug } from './validate.ts';

export interface ShareRouteDeps {
  service: ShareService;
  limits: ShareBodyLimits;
  /** The process body budget: a share body is read under its key's share of it (forKey), as a chat body is. */
  bodyBudget: ProcessBodyBudget;
  metrics: Pick<Metrics, 'shareReads'>;
  /** Failed share reads per client address (shares.failed_reads_per_minute). */
  failedReads: FailureWindow;
  clientAddress: ClientAddress;
  /** The gate's authenticator: the key is looked at again once a share body is in (create). */
  auth: Pick<Authenticator, 'authenticate' | 'current'>;
}

function throttledReads(ms: number): GatewayError {
  const s = Math.max(1, Math.ceil(ms / 1000));
  return new GatewayError('rate_limit_exceeded', `Too many failed share reads from this address; retry in ${s}s.`, {
    headers: { 'retry-after': String(s), 'retry-after-ms': String(Math.ceil(ms)) },
  });
}

// Reads are per-render capabilities: no cache may keep a body (or a 404/410: RFC 9111 lets caches
// store a 404 or 410 heuristically, which would hide a share published or revoked since). A read is
// anyone's text served from the console's origin (/console is on this listener) to anyone who follows a
// link: never sniffed as anything but JSON, and if a browser opens it, no script, fetch or framing.
const READ_HEADERS = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'; sandbox",
};

/** Writes a JSON body that is already text (the read body splices in the stored snapshot). */
function sendJsonText(res: ServerResponse, text: string, headers: Record<string, string>): void {
  res.statusCode = 200;
  for (const h in headers) res.setHeader(h, headers[h]!);
  res.setHeader('content-type', 'application/json');
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

/** 204 with the request's extra headers (x-ratelimit-*), which sendEmpty does not write. */
function noContent(ctx: RequestContext): void {
  if (ctx.extraHeaders) for (const h in ctx.extraHeaders) ctx.res.setHeader(h, ctx.extraHeaders[h]!);
  sendEmpty(ctx.res, 204);
}

/** The share body validateShareBody checks (shares/validate.ts); the snapshot's other keys are kept. */
export const SHARE_BODY_SCHEMA: Record<string, unknown> = {
  type: 'object',
  required: ['snapshot'],
  additionalProperties: true,
  properties: {
    snapshot: {
      type: 'object',
      required: ['messages'],
      properties: {
        title: { type: ['string', 'null'] },
        model: { type: ['string', 'null'] },
        messages: { type: 'array', minItems: 1, items: { type: 'object' } },
        metadata: { type: ['object', 'null'] },
      },
    },
    files: {
      type: 'array',
      items: {
        type: 'object',
        required: ['name', 'content_type', 'size'],
        properties: {
          name: { type: 'string', minLength: 1, maxLength: 255 },
          content_type: { type: 'string' },
          size: { type: 'integer', minimum: 0 },
        },
      },
    },
  },
};
const CREATED_SHARE_SCHEMA = {
  type: 'object',
  properties: {
    slug: { type: 'string' },
    created_at: { type: 'string' },
    uploads: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          name: { type: 'string' },
          url: { type: 'string' },
          method: { const: 'PUT' },
          headers: { type: 'object' },
          expires_at: { type: 'string' },
        },
      },
    },
  },
};

/** The public share routes. */
export function shareRoutes(d: ShareRouteDeps): Route[] {
  async function create(ctx: RequestContext) {
    const key = ctx.key!;
    // Under the key's own cap (limits.max_inflight_body_bytes_per_key → 429), not only the process's:
    // one key's stalled uploads must not take the whole budget from every other account (SPEC §13).
    const body = await readShareBody(ctx.req, d.limits, false, d.bodyBudget.forKey(key.id));
    // The key again, now that the body is in (up to server.body_timeout_ms after the gate): one disabled,
    // expired, rolled over or deleted meanwhile publishes nothing (as for a metered request, routes/metered.ts).
    if (!d.auth.current(key)) requireScope((ctx.key = await d.auth.authenticate(ctx.req)), 'shares');
    const created = await d.service.create(key.account, body, key.id);
    ctx.log.share_files = body.files.length;
    sendJson(ctx.res, 201, created, ctx.extraHeaders);
  }

  async function read(ctx: RequestContext) {
    ctx.extraHeaders = { ...ctx.extraHeaders, ...READ_HEADERS };
    let status = 500;
    // Slugs are unguessable (128.9 bits), but each probe costs a store read: failed reads (404, 410,
    // 422) are limited per address. A live slug is served to any address whatever it sent before (SPEC
    // §13: a page renderer shares one address with every visitor), so the limiter only turns a read that
    // failed into 429: a throttled address still costs one lookup per fresh well-formed slug (the share
    // cache remembers unknown ones), none for a malformed one.
    const address = d.clientAddress(ctx.req);
    try {
      const text = await d.service.read(validateSlug(ctx.params.slug!));
      status = 200;
      sendJsonText(ctx.res, text, ctx.extraHeaders);
    } catch (e) {
      status = (e as { status?: number }).status ?? 500;
      if (status === 404 || status === 410 || status === 422) {
        const wait = d.failedReads.blockedFor(address);
        d.failedReads.fail(address);
        if (wait > 0) {
          status = 429;
          throw throttledReads(wait);
        }
      }
      throw e;
    } finally {
      d.metrics.shareReads.inc({ status: String(status) });
    }
  }

  async function revoke(ctx: RequestContext) {
    const key = ctx.key!;
    await d.service.revoke(validateSlug(ctx.params.slug!), key.account);
    noContent(ctx);
  }

  return [
    {
      method: 'POST',
      pattern: '/v1/shares',
      handler: create,
      auth: 'shares',
      doc: {
        summary: 'Publish a conversation share; returns presigned upload URLs for its files',
        auth: 'key',
        scope: 'shares',
        body: SHARE_BODY_SCHEMA,
        responses: {
          201: { description: 'Created', schema: CREATED_SHARE_SCHEMA },
          401: 'Missing or invalid key',
          403: 'Key lacks the shares scope',
          413: 'Snapshot over shares.max_snapshot_bytes',
          415: 'Not application/json',
          422: 'Invalid body',
          429: 'Rate limit, concurrency limit or share quota (share_quota_exceeded)',
          503: 'File storage or the body budget unavailable',
        },
      },
    },
    {
      method: 'GET',
      pattern: '/v1/shares/{slug}',
      handler: read,
      doc: {
        summary: 'Read a share (no key: the slug is the capability); presigned file URLs',
        auth: 'none',
        responses: {
          200: {
            description: 'The share as published',
            schema: {
              type: 'object',
              properties: {
                slug: { type: 'string' },
                created_at: { type: 'string' },
                snapshot: { type: 'object' },
                files: { type: 'array', items: { type: 'object' } },
              },
            },
          },
          404: 'Unknown slug',
          410: 'Revoked',
          422: 'Malformed slug',
          429: 'Too many failed reads from this address',
        },
      },
    },
    {
      method: 'DELETE',
      pattern: '/v1/shares/{slug}',
      handler: revoke,
      auth: 'shares',
      doc: {
        summary: "Revoke one of the key's account's shares",
        auth: 'key',
        scope: 'shares',
        responses: {
          204: 'Revoked',
          401: 'Missing or invalid key',
          403: 'Key lacks the shares scope',
          404: "Unknown, or another account's share",
          422: 'Malformed slug',
          429: 'Rate or concurrency limit',
        },
      },
    },
  ];
}
