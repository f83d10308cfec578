/**
 * `npm run demo`: the upstream simulator, a local S3 server (share file uploads) and a gateway on the
 * embedded store, one test key and one funded live key, console sign-in links for a member of the
 * demo account and for an operator, and ready-to-paste curl and OpenAI SDK snippets. Ctrl-C stops all three.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { parseConfig } from '../src/config/load.ts';
import { createGateway } from '../src/gateway.ts';
import { createLogger } from '../src/obs/logger.ts';
import { createMemoryStore } from '../src/store/memory-store.ts';
import { startSimulator } from '../src/simulator/simulator.ts';
import { bootWarnings, listenErrorMessage } from '../src/obs/boot-report.ts';
import { startLocalS3 } from './local-s3.ts';

const sim = await startSimulator({ record: false });
const s3 = await startLocalS3('shares');
// 24 random bytes → 32 base64url characters, the admin token's minimum length.
const adminToken = process.env.TOLLGATE_ADMIN_TOKEN || randomBytes(24).toString('base64url');
const env: NodeJS.ProcessEnv = {
  ...process.env,
  SIM_URL: sim.url,
  TOLLGATE_ADMIN_TOKEN: adminToken,
  S3_ENDPOINT: s3.endpoint,
  AWS_ACCESS_KEY_ID: s3.accessKeyId,
  AWS_SECRET_ACCESS_KEY: s3.secretAccessKey,
};
const file = env.TOLLGATE_CONFIG || 'config/demo.yaml';
const config = parseConfig(await readFile(file, 'utf8'), env);
const logger = createLogger(env.LOG_LEVEL ?? 'warn');
for (const w of bootWarnings(config)) logger.warn(w);
const store = createMemoryStore();
const gateway = createGateway({ config, store, logger });
let urls;
try {
  urls = await gateway.listen();
} catch (e) {
  const line = listenErrorMessage(e, config);
  if (!line) throw e;
  process.stderr.write(`${line}\n`);
  await Promise.all([sim.close(), s3.close()]);
  process.exit(1);
}
const { publicUrl, adminUrl } = urls;

async function admin(path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${adminUrl}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as Record<string, unknown>;
}
const testKey = await admin('/admin/keys', { account: 'demo', env: 'test', name: 'demo test key' });
const liveKey = await admin('/admin/keys', { account: 'demo', env: 'live', name: 'demo live key' });
await admin('/admin/accounts/demo/credits', { amount_micros: 10_000_000, idempotency_key: 'demo-grant', note: 'demo: 10 credits' });
const model = config.models[0]!.name;
// Console links (SPEC §9) live an hour here, the longest allowed: time to read this screen first.
const memberLink = await admin('/admin/console/sessions', { account: 'demo', ttl_seconds: 3600 });
const operatorLink = await admin('/admin/console/sessions', { operator: true, ttl_seconds: 3600 });

process.stdout.write(`
Tollgate demo is running (embedded store: state is lost when you stop it).

  public API   ${publicUrl}/v1        upstream simulator: ${sim.url}
  S3 (shares)  ${s3.endpoint}/${s3.bucket}   AWS_ACCESS_KEY_ID=${s3.accessKeyId} AWS_SECRET_ACCESS_KEY=${s3.secretAccessKey}
  admin API    ${adminUrl}            TOLLGATE_ADMIN_TOKEN=${adminToken}
  metrics      ${adminUrl}/metrics

  test key (free, rate-limited)  ${testKey.key}
  live key (account "demo", 10 credits)  ${liveKey.key}

  web console (each link signs in once, within the hour):
    member of "demo"  ${memberLink.url}
    operator          ${operatorLink.url}
  new links: TOLLGATE_ADMIN_TOKEN=${adminToken} TOLLGATE_ADMIN_URL=${adminUrl} npx tollgate console link --account demo

Try it:

  curl -s ${publicUrl}/v1/chat/completions \\
    -H "Authorization: Bearer ${liveKey.key}" -H "Content-Type: application/json" \\
    -d '{"model":"${model}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":20}'

  curl -s ${adminUrl}/admin/accounts/demo/ledger -H "Authorization: Bearer ${adminToken}"

  # OpenAI SDK (npm i openai), streaming:
  import OpenAI from 'openai';
  const client = new OpenAI({ apiKey: '${testKey.key}', baseURL: '${publicUrl}/v1' });
  const stream = await client.chat.completions.create({ model: '${model}', stream: true,
    messages: [{ role: 'user', content: 'Hello!' }] });
  for await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta?.content ?? '');

  # The CLI drives the admin API (npx runs it on the Node that npm ci installed; or npm run -s tollgate -- …):
  TOLLGATE_ADMIN_TOKEN=${adminToken} TOLLGATE_ADMIN_URL=${adminUrl} npx tollgate credits show demo

Ctrl-C to stop.
`);

const stop = async () => {
  await gateway.close(2000);
  await store.close();
  await sim.close();
  await s3.close();
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
