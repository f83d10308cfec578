/**
 * `${VAR}` and `${VAR:-default}` in YAML string values (SPEC §6). Applied to parsed scalars, not to
 * the raw text, so a value can never inject YAML syntax.
 */
import { ConfigError } from './errors.ts';

const PATTERN = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

export function interpolate(value: unknown, env: NodeJS.ProcessEnv, path = ''): unknown {
  if (typeof value === 'string') {
    return value.replace(PATTERN, (_m, name: string, fallback: string | undefined) => {
      const v = env[name];
      if (v !== undefined && v !== '') return v;
      if (fallback !== undefined) return fallback;
      if (v === '') return '';
      throw new ConfigError(path || '(root)', `environment variable ${name} is not set (write \${${name}:-} to allow empty)`);
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, env, `${path}[${i}]`));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = interpolate(v, env, path ? `${path}.${k}` : k);
    return out;
  }
  return value;
}
