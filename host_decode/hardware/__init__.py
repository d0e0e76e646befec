"""Per-PC hardware data: SASS parsing, pc2region maps, adapters (ncu, CUPTI, NVBit) and the join."""
