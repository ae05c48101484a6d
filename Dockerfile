# The `crossword serve` image. Built with exactly CI's steps (scripts/install-deps, then make
# targets) on Debian 12; the runtime stage holds the binary and the shared libraries it links
# (make install), runs as a non-root user, and has no model: mount the GGUF from a volume
# (deploy/k8s, docs/deploy.md). The embedded tiny model inside the binary is the only default.
#   docker build -t crossword:0.1.0 .
#   docker run -p 8080:8080 -v /srv/models:/models:ro crossword:0.1.0 serve --host 0.0.0.0 \
#     -m /models/Clover-35B-A3B-Preview-Q4_0.gguf
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN scripts/install-deps
RUN make install PREFIX=/opt/crossword

FROM debian:12-slim
COPY --from=build /opt/crossword /opt/crossword
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/opt/crossword/bin/crossword"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
