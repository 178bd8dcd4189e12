"""ST Edge AI Core (`stedgeai generate --target stm32n6`) output, read as the hardware sees it.

`model`: the plain data every reader produces (pools, buffers, epoch blocks, stream-engine and unit
configurations); `csource`: the generated C read with tree-sitter's C grammar; readers of each file
kind build on those two.
"""
