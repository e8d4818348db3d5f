"""The file_search tool server: retrieval over a key's own files (parse, chunk, embed, hybrid index, search)."""
