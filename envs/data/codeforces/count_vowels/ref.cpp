#include <bits/stdc++.h>
using namespace std;
int main() {
    string s;
    cin >> s;
    int k = 0;
    for (char c : s) k += string("aeiou").find(c) != string::npos;
    cout << k << endl;
    return 0;
}
