"""Importers: programs that another toolchain generated, read into npusim's data (siblings of the
compiler, which builds programs from models). `stedgeai`: ST Edge AI Core's STM32N6 output."""
