/** GET /v1/models (SPEC §1.3): the configured models this key may use, in OpenAI's list shape. */
import { sendJson } from '../http/respond.ts';
import type { Route } from '../http/router.ts';
import type { RequestContext } from '../http/context.ts';
import type { ModelConfig } from '../config/schema.ts';

export function modelRoutes(d: { models: readonly ModelConfig[] }): Route[] {
  const all = d.models.map((m) => ({ id: m.name, object: 'model' as const, created: m.created, owned_by: m.ownedBy }));
  async function list(ctx: RequestContext) {
    const key = ctx.key!;
    const data = key.models.length === 0 ? all : all.filter((m) => key.models.includes(m.id));
    sendJson(ctx.res, 200, { object: 'list', data }, ctx.extraHeaders);
  }
  return [
    {
      method: 'GET',
      pattern: '/v1/models',
      handler: list,
      auth: 'models',
      doc: {
        summary: 'The models this key may use (OpenAI list shape)',
        auth: 'key',
        scope: 'models',
        responses: {
          200: {
            description: 'Model list',
            schema: {
              type: 'object',
              properties: {
                object: { const: 'list' },
                data: {
                  type: 'array',
                  items: {
                    type: 'object',
                    properties: {
                      id: { type: 'string' },
                      object: { const: 'model' },
                      created: { type: 'integer' },
                      owned_by: { type: 'string' },
                    },
                  },
                },
              },
            },
          },
          401: 'Missing or invalid key',
          403: 'Key lacks the models scope',
          429: 'Rate or concurrency limit',
        },
      },
    },
  ];
}
