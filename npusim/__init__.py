"""npusim: cycle-approximate simulator of the STM32N657 Neural-ART NPU."""

__version__ = "0.1.0"
