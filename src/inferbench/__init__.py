"""inferbench: inference benchmarks as a Snakemake workflow (README.md)."""

import os

__version__ = "0.1.0"

# Models are built from the libraries' code with random weights: nothing inferbench runs may reach the
# Hugging Face Hub (a config value naming a Hub repository is refused before any job, plan.config; this
# holds if one slips through). Set before transformers, timm or huggingface_hub is imported, which read
# it once. Data downloads (Kaggle, UCI) do not go through the Hub.
os.environ["HF_HUB_OFFLINE"] = "1"
