/**
 * The OpenAPI 3.1 document of both listeners, generated from the route tables: every Route carries its
 * `doc` (summary, credentials, body and query schemas, responses) next to its handler, so a route and its
 * description cannot drift apart silently, and a test fails for a route without one
 * (test/http/openapi.test.ts), and checks each body schema's required fields and extra-field policy
 * against the route's validator. Served at GET /openapi.json on the admin listener.
 */
import type { Route } from './router.ts';
import { ERROR_CODES } from './errors.ts';
import type { Scope } from '../store/types.ts';

/** The JSON Schema subset the docs use. */
export type Schema = Record<string, unknown>;

export interface RouteDoc {
  summary: string;
  /** `key`: a svc-live-/svc-test- bearer key (with `scope`); `admin`: the admin token; `none`. */
  auth: 'key' | 'admin' | 'none';
  scope?: Scope;
  body?: Schema;
  query?: Record<string, Schema>;
  /** Status → description, or description and JSON body schema. Error statuses get the error bodies. */
  responses: Record<number, string | { description: string; schema?: Schema; contentType?: string }>;
}

const ERROR_BODY: Schema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['message', 'type', 'code', 'param'],
      properties: {
        message: { type: 'string' },
        type: { type: 'string' },
        code: { type: 'string', enum: Object.keys(ERROR_CODES) },
        param: { type: ['string', 'null'] },
      },
    },
  },
};
const VALIDATION_BODY: Schema = {
  type: 'object',
  required: ['detail'],
  properties: {
    detail: {
      type: 'array',
      items: {
        type: 'object',
        required: ['loc', 'msg', 'type', 'input', 'ctx'],
        properties: {
          loc: { type: 'array', items: { type: 'string' } },
          msg: { type: 'string' },
          type: { type: 'string' },
          input: {},
          ctx: { type: 'object' },
        },
      },
    },
  },
};

function operation(r: Route, listener: 'public' | 'admin'): Record<string, unknown> {
  const doc = r.doc!;
  const params = [...r.pattern.matchAll(/\{(\w+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
  for (const [name, schema] of Object.entries(doc.query ?? {})) params.push({ name, in: 'query', required: false, schema } as never);
  const responses: Record<string, unknown> = {};
  for (const [status, v] of Object.entries(doc.responses)) {
    const { description, schema, contentType } = typeof v === 'string' ? { description: v, schema: undefined, contentType: undefined } : v;
    const s = Number(status);
    const body = schema ?? (s === 422 ? VALIDATION_BODY : s >= 400 ? ERROR_BODY : undefined);
    responses[status] = { description, ...(body && { content: { [contentType ?? 'application/json']: { schema: body } } }) };
  }
  return {
    summary: doc.summary,
    tags: [listener],
    operationId: `${r.method.toLowerCase()}${r.pattern
      .replace(/[{}]/g, '')
      .replace(/\/(\w)/g, (_, c: string) => c.toUpperCase())
      .replace(/\W/g, '')}`,
    ...(doc.auth === 'key' && { security: [{ apiKey: [] }], ...(doc.scope && { 'x-tollgate-scope': doc.scope }) }),
    ...(doc.auth === 'admin' && { security: [{ adminToken: [] }] }),
    ...(doc.auth === 'none' && { security: [] }),
    ...(params.length > 0 && { parameters: params }),
    ...(doc.body && { requestBody: { required: true, content: { 'application/json': { schema: doc.body } } } }),
    responses,
  };
}

/** The document for the two route tables; routes without `doc` are left out (the test catches them). */
export function openApiDocument(o: {
  version: string;
  publicRoutes: readonly Route[];
  adminRoutes: readonly Route[];
}): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [listener, routes] of [
    ['public', o.publicRoutes],
    ['admin', o.adminRoutes],
  ] as const) {
    for (const r of routes) {
      if (!r.doc) continue;
      (paths[r.pattern] ??= {})[r.method.toLowerCase()] = operation(r, listener);
    }
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Tollgate',
      version: o.version,
      description:
        'Metering gateway for OpenAI-compatible model servers. Public paths are served on PORT; paths tagged admin on ADMIN_PORT.',
    },
    tags: [
      { name: 'public', description: 'The public listener (PORT)' },
      { name: 'admin', description: 'The admin listener (ADMIN_PORT)' },
    ],
    paths,
    components: {
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: 'svc-live-… or svc-test-… key' },
        adminToken: { type: 'http', scheme: 'bearer', description: 'TOLLGATE_ADMIN_TOKEN' },
      },
      schemas: { Error: ERROR_BODY, ValidationError: VALIDATION_BODY },
    },
  };
}
