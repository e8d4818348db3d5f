"""Sandbox containers on a Docker engine, shared by every tool that runs them (python's docker backend, the
container tool).

- `settings`: the flags every docker-backed tool server shares;
- `specs`: what one sandbox container is (hardened by default);
- `engine`: the Docker engine connection, where the SDK's calls and exceptions enter;
- `leases`: owner leases, so a dead replica's sandboxes are removed by a live one;
- `runtime`: one instance's labelled sandboxes, their census and memory;
- `stream`: a started container's attached stdin/stdout;
- `pool`: the warm pool;
- `backend`: the pooled sandbox whose process speaks JSON lines, which both Docker backends build on.

And the one file contract of every sandbox, Docker or not (the python tool's bubblewrap one too):

- `files`: write, read and list under /mnt/data, from inside the sandbox (stdlib only);
- `file_tools`: the hidden MCP file tools both sandbox tool servers serve, and the program that ships
  `files` into a sandbox ahead of its kernel or agent.
"""
