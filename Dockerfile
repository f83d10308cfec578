# Tollgate image. Node runs the TypeScript sources directly (type stripping), so there is no build
# stage: one stage installs production dependencies, the final stage adds the sources.
#   docker build -t tollgate .
#   docker run -p 8080:8080 -e REDIS_URL=redis://redis:6379 -e TOLLGATE_ADMIN_TOKEN=... tollgate
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
USER node
EXPOSE 8080 9090
# Slim images have no curl; Node 26 has fetch. 127.0.0.1 reaches the admin listener on its default
# ADMIN_HOST and on 0.0.0.0.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.ADMIN_PORT||9090)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
CMD ["node", "src/main.ts"]
