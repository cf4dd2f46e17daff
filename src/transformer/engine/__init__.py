"""The engine: what a production run needs, standing on the chapters' mechanisms.

Every module here is generated from an appendix notebook (91-97; its header names the notebook to edit):
corpora on disk, the training configuration, checkpoints and the shipped models, metrics, devices and
processes, the run folder and the training run, the ONNX translator and the command line. The chapters'
modules (one floor down) never import this sub-package; what both floors stand on (`transformer.errors`,
`transformer.files`) is at the bottom.
"""
