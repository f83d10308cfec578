// The OpenAPI document (GET /openapi.json on the admin listener) is generated from the route tables:
// every route of both listeners must describe itself, and each body schema must agree with the route's
// validator on its required fields and on whether unknown fields are refused.
import t from 'tap';
import { startGateway, ADMIN_TOKEN } from '../helpers/gateway.ts';
import type { Route } from '../../src/http/router.ts';

const gw = await startGateway(t);
const live = await gw.createKey({ account: 'acme', env: 'live' });
const doc = (await (await fetch(`${gw.adminUrl}/openapi.json`)).json()) as { openapi: string; paths: Record<string, Record<string, any>> };
const tables: [string, readonly Route[]][] = [
  ['public', gw.gateway.routes.public],
  ['admin', gw.gateway.routes.admin],
];

t.test('every route of both listeners is in the document', async (t) => {
  t.equal(doc.openapi, '3.1.0');
  for (const [listener, routes] of tables) {
    for (const r of routes) {
      t.ok(r.doc, `${listener} ${r.method} ${r.pattern} has a doc`);
      const op = doc.paths[r.pattern]?.[r.method.toLowerCase()];
      t.ok(op, `${r.method} ${r.pattern} is in /openapi.json`);
      t.same(op?.tags, [listener]);
      const params = [...r.pattern.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
      t.same(
        (op?.parameters ?? []).filter((p: any) => p.in === 'path').map((p: any) => p.name),
        params,
        'path parameters declared',
      );
      t.ok(Object.keys(op?.responses ?? {}).length > 0, 'responses listed');
    }
  }
  const count = Object.values(doc.paths).reduce((n, p) => n + Object.keys(p).length, 0);
  t.equal(
    count,
    tables.reduce((n, [, r]) => n + r.length, 0),
    'nothing extra',
  );
});

t.test("each body schema agrees with the route's validator: required fields and unknown fields", async (t) => {
  for (const [listener, routes] of tables) {
    for (const r of routes) {
      const schema = r.doc?.body as { required?: string[]; additionalProperties?: boolean } | undefined;
      if (!schema) continue;
      const base = listener === 'admin' ? gw.adminUrl : gw.url;
      const path = r.pattern.replace('{id}', r.pattern.startsWith('/admin/keys') ? live.id : 'acme');
      const auth = listener === 'admin' ? `Bearer ${ADMIN_TOKEN}` : `Bearer ${live.key}`;
      const res = await fetch(`${base}${path}`, {
        method: r.method,
        headers: { authorization: auth, 'content-type': 'application/json' },
        body: JSON.stringify({ zz_unknown: 1 }),
      });
      const body = (await res.json()) as { detail?: Array<{ loc: string[]; type: string }> };
      const issues = body.detail ?? [];
      const missing = issues
        .filter((i) => i.type === 'missing' && i.loc.length === 2)
        .map((i) => i.loc[1])
        .sort();
      if ((schema.required ?? []).length > 0) {
        t.equal(res.status, 422, `${r.method} ${r.pattern}: {} is refused`);
        t.same(missing, [...(schema.required ?? [])].sort(), `${r.method} ${r.pattern}: the required fields are the validator's`);
      }
      const refusedExtra = issues.some((i) => i.type === 'extra_forbidden' && i.loc[1] === 'zz_unknown');
      t.equal(
        refusedExtra,
        schema.additionalProperties === false,
        `${r.method} ${r.pattern}: unknown fields ${schema.additionalProperties === false ? 'refused' : 'kept'} as documented`,
      );
    }
  }
});
