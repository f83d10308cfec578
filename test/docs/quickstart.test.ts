// The README's quickstart configs (config/examples/*.yaml) run as written: the same file, with only its
// upstream variable pointed at our simulator, serves a metered chat through the OpenAI SDK.
import t from 'tap';
import { readFile } from 'node:fs/promises';
import OpenAI from 'openai';
import { parseConfig } from '../../src/config/load.ts';
import { createGateway } from '../../src/gateway.ts';
import { createLogger } from '../../src/obs/logger.ts';
import { createMetrics } from '../../src/obs/metrics.ts';
import { createMemoryStore } from '../../src/store/memory-store.ts';
import { bootWarnings } from '../../src/obs/boot-report.ts';
import { startSim } from '../e2e/chat-fixture.ts';
import { ADMIN_TOKEN } from '../helpers/gateway.ts';

const cases = [
  {
    file: 'config/examples/vllm.yaml',
    urlVar: 'VLLM_URL',
    model: 'llama-3.1-8b',
    upstreamModel: 'meta-llama/Llama-3.1-8B-Instruct',
    priced: true,
  },
  { file: 'config/examples/ollama.yaml', urlVar: 'OLLAMA_URL', model: 'llama3.2', upstreamModel: 'llama3.2', priced: false },
];

for (const c of cases) {
  t.test(`${c.file}: a live key chats through the OpenAI SDK, billed from the upstream's usage`, async (t) => {
    const sim = await startSim(t);
    const text = await readFile(new URL(`../../${c.file}`, import.meta.url), 'utf8');
    const config = parseConfig(text, { [c.urlVar]: sim.url, PORT: '0', ADMIN_PORT: '0', TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN });
    t.same(bootWarnings(config), [], 'the example needs no warning');
    const store = createMemoryStore();
    const gateway = createGateway({ config, store, logger: createLogger('silent'), metrics: createMetrics({ defaults: false }) });
    const { publicUrl, adminUrl } = await gateway.listen();
    t.teardown(async () => {
      await gateway.close(500);
      await store.close();
    });
    const admin = async (path: string, body: unknown) =>
      (
        await fetch(`${adminUrl}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        })
      ).json() as Promise<Record<string, any>>;
    const key = await admin('/admin/keys', { account: 'qs', env: 'live', name: 'quickstart' });
    await admin('/admin/accounts/qs/credits', { amount_micros: 1_000_000 });
    const client = new OpenAI({ apiKey: key.key, baseURL: `${publicUrl}/v1`, maxRetries: 0 });
    const r = await client.chat.completions.create({ model: c.model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });
    t.ok(r.choices[0]?.message.content, 'an answer');
    t.equal(sim.requests.at(-1)?.body?.model, c.upstreamModel, 'the upstream got its own model id');
    type Entry = { kind: string; amount_micros: number; prompt_tokens: number; completion_tokens: number };
    // The settle lands after the response (SPEC §2a: within 1 s); poll the ledger for it.
    let debit: Entry | undefined;
    for (const until = Date.now() + 2_000; !debit && Date.now() < until; await new Promise((r) => setTimeout(r, 10))) {
      const ledger = (await (
        await fetch(`${adminUrl}/admin/accounts/qs/ledger`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
      ).json()) as { entries: Entry[] };
      debit = ledger.entries.find((e) => e.kind === 'debit');
    }
    t.ok(debit, 'the request was settled');
    t.equal(debit!.prompt_tokens, r.usage!.prompt_tokens);
    t.equal(debit!.completion_tokens, r.usage!.completion_tokens);
    if (c.priced) t.ok(debit!.amount_micros < 0, 'a priced model debits');
    else t.equal(debit!.amount_micros, 0, 'a free model records a 0 debit');
  });
}
