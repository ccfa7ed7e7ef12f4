"""resnet: reproduce the residual-network papers from the command line."""
__version__ = "0.1.0"
