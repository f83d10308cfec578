# Tollgate image. Node runs the TypeScript sources directly (type stripping), so there is no build
# stage: one stage installs production dependencies, the final stage adds the sources.
#   docker build -t tollgate .
#   docker run -p 8080:8080 \
#     -e REDIS_URL=redis://redis:6379 -e TOLLGATE_ADMIN_TOKEN="$(openssl rand -base64 32)" \
#     -e VLLM_URL_1=http://vllm-1:8000/v1 -e VLLM_URL_2=http://vllm-2:8000/v1 -e VLLM_API_KEY=... \
#     -e S3_ENDPOINT=https://s3.example.com -e S3_BUCKET=shares -e AWS_REGION=us-east-1 \
#     -e AWS_ACCESS_KEY_ID=... -e AWS_SECRET_ACCESS_KEY=... -e CONSOLE_PUBLIC_URL=https://api.example.com tollgate
# The baked config is config/tollgate.yaml: every value above is one of its ${VAR}s (README, "Running
# it in a container", lists them all). Mount another file and set TOLLGATE_CONFIG to replace it.
# NODE_ENV=production refuses to start without REDIS_URL (SPEC §5). SIGTERM drains in-flight streams
# (SPEC §8): give `docker stop --time` more than the configured drain deadline (Docker's default is 10 s).

FROM node:26-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# --omit=optional: the image's Node is 26 already; the node-linux-* packages are for old-Node hosts.
RUN npm ci --omit=dev --omit=optional --no-audit --no-fund && npm cache clean --force

FROM node:26-slim
ENV NODE_ENV=production
# V8 sizes its heap from the machine's RAM and keeps what a burst grew it to; the gateway's live heap is
# small (~75 MB under load, +58 MB once the tokenizer loads), so 256 MB caps RSS near 300 MB with
# 1,000 open streams (bench/README.md). Override with NODE_OPTIONS for very large stream counts.
ENV NODE_OPTIONS=--max-old-space-size=256
# Public listener on every interface inside the container. The admin listener keeps its default
# 127.0.0.1 (SPEC §2); set ADMIN_HOST=0.0.0.0 to scrape /metrics from outside the container.
ENV HOST=0.0.0.0
WORKDIR /app
# Root-owned files, run as `node`: the process cannot rewrite its own code or dependencies.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY src ./src
COPY config ./config
COPY bin ./bin
# The HEALTHCHECK, and the Node-version check bin/tollgate.js (the CLI) imports first.
COPY scripts/healthcheck.ts scripts/node-check.mjs ./scripts/
# The settle spool (server.spool_dir, ./data/spool): the one directory the gateway writes, owned by `node` so
# a volume mounted there starts writable (docs/operations.md).
RUN mkdir -p /app/data/spool && chown -R node:node /app/data
USER node
EXPOSE 8080 9090
# The check resolves the admin listener from the same config and environment as the gateway (an
# admin_port set in YAML included), then GETs /healthz with Node's fetch (slim images have no curl).
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 CMD ["node", "scripts/healthcheck.ts"]
CMD ["node", "src/main.ts"]
