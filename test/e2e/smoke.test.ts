import t from 'tap';
import { startGateway } from '../helpers/gateway.ts';

t.test('a gateway built in a few lines serves models to a key it created', async (t) => {
  const gw = await startGateway(t);
  const { key } = await gw.createKey({ account: 'acme', env: 'test', models: ['sim-free'] });
  const res = await fetch(`${gw.url}/v1/models`, { headers: gw.auth(key) });
  t.equal(res.status, 200);
  const body = (await res.json()) as { data: { id: string }[] };
  t.same(
    body.data.map((m) => m.id),
    ['sim-free'],
  );
  t.match(res.headers.get('x-request-id'), /^req_[1-9A-HJ-NP-Za-km-z]{22}$/);
});
