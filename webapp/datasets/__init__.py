"""Task datasets (versioned) and tasks: import, export, synthetic generation."""
