/** Reads the YAML config file (TOLLGATE_CONFIG or config/tollgate.yaml) at boot. */
import { readFile } from 'node:fs/promises';
import { parse, YAMLParseError } from 'yaml';
import { ConfigError } from './errors.ts';
import { interpolate } from './interpolate.ts';
import { compileConfig, type Config } from './schema.ts';

/** Parses, interpolates and compiles config text. Throws ConfigError naming the bad field. */
export function parseConfig(text: string, env: NodeJS.ProcessEnv): Config {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (e) {
    const line = e instanceof YAMLParseError ? ` (line ${e.linePos?.[0]?.line ?? '?'})` : '';
    throw new ConfigError('(file)', `not valid YAML${line}: ${(e as Error).message.split('\n')[0]}`);
  }
  return compileConfig(interpolate(doc, env), env);
}

/** Loads the config file named by TOLLGATE_CONFIG, else `config/tollgate.yaml`. */
export async function loadConfig(env: NodeJS.ProcessEnv): Promise<{ config: Config; file: string }> {
  const file = env.TOLLGATE_CONFIG || 'config/tollgate.yaml';
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    throw new ConfigError(file, `cannot read config file: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  return { config: parseConfig(text, env), file };
}
