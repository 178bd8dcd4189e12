"""Graph rewrites into forms the NPU recipes take, each kept only where the mapping table (`legality`)
puts the result on the NPU: convolution forms, matrix-product forms, the Erf form of GELU, channel
shuffle chains."""
