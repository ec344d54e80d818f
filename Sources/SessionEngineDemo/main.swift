print("SessionEngineDemo")
