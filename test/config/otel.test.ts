// The `otel` section (SPEC §15 traces): off unless an endpoint is configured, whatever OTEL_* says;
// validated with the field's path; a collector's base URL gets /v1/traces.
import t from 'tap';
import { parseConfig } from '../../src/config/load.ts';
import { ConfigError } from '../../src/config/errors.ts';
import type { Test } from 'tap';

const MODELS = `
models:
  - name: m1
    price: { input: 0.1, output: 0.4 }
    upstreams:
      - { url: "http://127.0.0.1:8000/v1" }
`;

/** The config must be refused with a ConfigError whose message matches `path`. */
function fails(t: Test, text: string, path: RegExp): void {
  try {
    parseConfig(MODELS + text, {});
    t.fail(`accepted: ${text.trim()}`);
  } catch (e) {
    t.ok(e instanceof ConfigError, 'a ConfigError');
    t.match((e as Error).message, path);
  }
}

t.test('off by default, and the standard OTEL_* variables do not turn it on', async (t) => {
  t.equal(parseConfig(MODELS, {}).otel, undefined);
  const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'false' };
  t.equal(parseConfig(MODELS, env).otel, undefined);
  // An interpolated endpoint left empty is off too (`endpoint: "${OTEL_ENDPOINT:-}"`).
  t.equal(parseConfig(MODELS + 'otel:\n  endpoint: "${OTEL_ENDPOINT:-}"\n  sample_ratio: 0.5\n', {}).otel, undefined);
});

t.test('an endpoint turns it on: defaults, base URL completed, full traces URL kept, headers lower-cased', async (t) => {
  const base = parseConfig(MODELS + 'otel: { endpoint: "http://collector:4318" }\n', {}).otel!;
  t.same(base, { endpoint: 'http://collector:4318/v1/traces', sampleRatio: 1, headers: {}, serviceName: 'tollgate' });
  const full = parseConfig(
    MODELS +
      'otel:\n  endpoint: "https://otlp.example.com/otlp/v1/traces"\n  sample_ratio: 0.25\n  service_name: gw-eu\n  headers: { X-Api-Key: "${K}" }\n',
    { K: 'vendor-key' },
  ).otel!;
  t.same(full, {
    endpoint: 'https://otlp.example.com/otlp/v1/traces',
    sampleRatio: 0.25,
    headers: { 'x-api-key': 'vendor-key' },
    serviceName: 'gw-eu',
  });
  t.ok(Object.isFrozen(full.headers), 'frozen with the rest of the config');
});

t.test('bad values stop the boot with the field path', async (t) => {
  fails(t, 'otel: { endpoint: "not a url" }\n', /otel\.endpoint/);
  fails(t, 'otel: { endpoint: "grpc://collector:4317" }\n', /otel\.endpoint.*http/);
  fails(t, 'otel: { endpoint: "http://c:4318", sample_ratio: 1.5 }\n', /otel\.sample_ratio/);
  fails(t, 'otel: { endpoint: "http://c:4318", sample_ratio: -0.1 }\n', /otel\.sample_ratio/);
  fails(t, 'otel: { endpoint: "http://c:4318", protocol: grpc }\n', /otel\.protocol.*unknown/);
  fails(t, 'otel: { endpoint: "http://c:4318", headers: { "bad header": x } }\n', /otel\.headers/);
  fails(t, 'otel: { endpoint: "http://c:4318", headers: { x-n: 5 } }\n', /otel\.headers\.x-n/);
});
